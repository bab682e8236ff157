#!/bin/bash
# Repeats one specprof configuration on the SGLang-shaped graph loop and keeps what a crash leaves:
# the workload's exit status, its last output (Python's faulthandler stacks on a fatal signal),
# specprof's output, and the kernel's segfault lines (the faulting library and offset). From the
# repository root, as root, on a GPU host with build/specprof and build/libspecprof_cupti.so.
#   bash bench/gpu/crashhunt.sh RUNS CYCLES -- SPECPROF-RUN-FLAGS...
# e.g. bash bench/gpu/crashhunt.sh 10 3000 -- --cupti-duty 100ms/1s
# Output under $OUT (default /tmp/crashhunt): summary.txt, and run-N/ for every run that failed.
# GRAPHS=off runs the eager loop instead. CUPTI_LIB (default build/libspecprof_cupti.so) names the
# injected library, and WRAP a command prefix for the workload alone (a sanitizer build:
# WRAP="env LD_PRELOAD=... ASAN_OPTIONS=..."). Extra environment for specprof and the target (e.g.
# SPECPROF_CUPTI_DUTY_GRAPHS=1) passes through.
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/crashhunt}
runs=$1 cycles=$2
shift 2
[ "${1:-}" = "--" ] && shift
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
{
  echo "date: $(date -u '+%F %T') UTC; flags: $*; runs $runs, cycles $cycles; lib ${CUPTI_LIB:-build/libspecprof_cupti.so}; wrap ${WRAP:-none}; graphs ${GRAPHS:-on}"
  ls -d "$(dirname "$P")"/../lib/python3*/site-packages/nvidia*cupti* 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} > "$OUT/summary.txt"
dmesg -C 2>/dev/null || true
fails=0
for i in $(seq 1 "$runs"); do
  d=/tmp/crashhunt-run-$i
  rm -rf "$d"
  mkdir -p "$d"
  t0=$(date +%s.%N)
  PYTHONFAULTHANDLER=1 SPECPROF_CUPTI_DEBUG=1 build/specprof run -q --interval 0 --cupti on \
    --cupti-lib "${CUPTI_LIB:-build/libspecprof_cupti.so}" --preset sglang-eagle -o "$d/sp" "$@" -- \
    ${WRAP:-} "$P" bench/gpu/spec_loop.py --worker sglang --graphs "${GRAPHS:-on}" --cycles "$cycles" --noise-scale 0.0518613 \
    --result "$d/result.json" > "$d/stdout.txt" 2> "$d/stderr.txt"
  rc=$?
  t1=$(date +%s.%N)
  ok=$([ -s "$d/result.json" ] && grep -q '"ok": true' "$d/result.json" && echo ok || echo FAIL)
  line="run $i: rc $rc, $ok, $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s"
  if [ -f "$d/sp/report.json" ]; then # the detach, the GPU switches, the joins, the throughput
    line="$line; $("$P" -c 'import json,sys
rep=json.load(open(sys.argv[1]))
g=(rep.get("processes") or [{}])[0].get("gpu") or {}
l=rep.get("loss") or {}
r=json.load(open(sys.argv[2])) if sys.argv[2] else {}
print("detached %s (wait %.2f ms), refused %s; windows %s, stopped at graphs %s; GPU switches %s (%.3f ms, max %.3f ms); launches without API record %s, outside windows %s, API records repeating an id %s; %.1f tok/s" % (
      g.get("lib_cupti_detaches", 0), g.get("lib_detach_stall_ns", 0) / 1e6, g.get("lib_cupti_detach_refused", 0),
      ((rep.get("processes") or [{}])[0].get("gpu_duty") or {}).get("windows", 0), g.get("lib_duty_stopped_graphs", 0),
      g.get("lib_gpu_switches", 0), g.get("lib_gpu_switch_ns", 0) / 1e6, g.get("lib_gpu_switch_max_ns", 0) / 1e6,
      l.get("launches_without_cupti_api_record", 0), l.get("launches_outside_gpu_windows", 0),
      l.get("api_records_duplicated", 0), r.get("tok_s") or 0))' \
      "$d/sp/report.json" "$([ -s "$d/result.json" ] && echo "$d/result.json")" 2>&1)"
  fi
  if [ "$ok" != ok ] || [ "$rc" != 0 ]; then
    fails=$((fails + 1))
    mkdir -p "$OUT/run-$i"
    tail -c 20000 "$d/stderr.txt" > "$OUT/run-$i/stderr-tail.txt"
    tail -c 4000 "$d/stdout.txt" > "$OUT/run-$i/stdout-tail.txt"
    [ -f "$d/sp/report.json" ] && cp "$d/sp/report.json" "$OUT/run-$i/"
    dmesg 2>/dev/null | tail -20 > "$OUT/run-$i/dmesg.txt"
    line="$line; dmesg: $(grep -m1 -i 'segfault\|trap\|general protection' "$OUT/run-$i/dmesg.txt")"
  fi
  echo "$line" | tee -a "$OUT/summary.txt"
done
echo "failed: $fails of $runs" | tee -a "$OUT/summary.txt"
