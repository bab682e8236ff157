# session 8, device call 5: the GPU kinds switched by application threads (the fix), under the
# windows that crashed 7 of 8 runs in calls 3-4; then the usual 100ms/1s duty cost vs none
set -u
ch() { local name=$1; shift; OUT=$OUT/$name bash bench/gpu/crashhunt.sh "$@" 2>&1 | tail -9 | sed "s/^/$name: /"; }
ch fix-node 6 3000 -- --cupti-duty 2ms/10ms
ch fix-graph 3 3000 -- --cupti-duty 2ms/10ms --cupti-graphs graph
for d in $OUT/fix-*/run-*; do [ -d "$d" ] && { echo "== $d"; grep -v 'probes attached' $d/stderr-tail.txt | tail -15; }; done
python3 - <<'PY'
import json,glob,os
for f in sorted(glob.glob('/tmp/crashhunt-run-*/sp/report.json'))[:3]:
    g=(json.load(open(f)).get('processes') or [{}])[0].get('gpu') or {}
    print(f, {k:g.get(k) for k in ('lib_gpu_switches','lib_gpu_switch_ns','lib_gpu_switch_max_ns','kernels')})
PY
/opt/torch/.venv/bin/python3 bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python /opt/torch/.venv/bin/python3 \
  --out /tmp/dutyfix --workloads eagle-graph --methods none,fullduty,full --reps 2 --eagle-cycles 3000 --budget-s 150 --run-timeout-s 45 > /tmp/dutyfix.log 2>&1
echo "dutyfix rc $?"; grep -A8 "^| method | runs" /tmp/dutyfix/table.md | head -8
for f in table.md raw.csv phases.csv; do cp /tmp/dutyfix/$f $OUT/dutyfix-$f 2>/dev/null; done
