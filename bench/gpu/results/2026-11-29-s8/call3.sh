set -u
A=$PWD/build/asan
OUT=$OUT/stress bash bench/gpu/crashhunt.sh 4 3000 -- --cupti-duty 2ms/10ms 2>&1 | tail -6
OUT=$OUT/asan CUPTI_LIB=$A/libspecprof_cupti.so WRAP="env LD_PRELOAD=$A/libasan.so.8 LD_LIBRARY_PATH=$A ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:halt_on_error=1:print_summary=1 UBSAN_OPTIONS=print_stacktrace=1" \
  bash bench/gpu/crashhunt.sh 2 2000 -- --cupti-duty 2ms/10ms 2>&1 | tail -4
for f in $OUT/asan/run-*/stderr-tail.txt; do [ -f "$f" ] && { echo "== $f"; grep -v 'probes attached' "$f" | tail -40; }; done
PIN=1 OUT=$OUT/lcpin bash bench/gpu/launchcost_h200.sh 3 40 none full nocb idle torchprof 2>&1 | grep -v 'probes attached\|UserWarning\|_warn_once' | tail -12
cd $OUT && tar czf lcpin.tgz lcpin && rm -f lcpin/*.json
