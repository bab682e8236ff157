#!/bin/bash
# The H200 runs prepared in session 5 and not yet made (its device time was spent): from the
# repository root, as root, on an nvidia-h200 machine with build/specprof and
# build/libspecprof_cupti.so carried. One part per call (each fits the 600 s limit); results are
# copied flat into $OUT (table.md, raw.csv, phases.csv per suite run).
#   accuracy   (issue 4) per-phase GPU active / elapsed against CUDA events: the GPU-bound eager
#              loop (hidden 8192) and the graph loop, with (c8) fullev: events in specprof's runs.
#   standing   (issue 6) the injected library's standing cost on the graph loop, split:
#              fullidle, idlenoov (no OVERHEAD kind), idleoff (not subscribed), fullduty, dutynoov.
#   hf         (issue 6) HF assisted generation: none, full, fullduty, torchprof, 3 repetitions.
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/specprof-pending}
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
suite() { # NAME ARGS...
  local name=$1
  shift
  $P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
    --out "/tmp/$name" "$@" > "/tmp/$name.log" 2>&1
  echo "$name: rc $?"
  tail -3 "/tmp/$name.log"
  for f in table.md raw.csv phases.csv; do [ -f "/tmp/$name/$f" ] && cp "/tmp/$name/$f" "$OUT/$name-$f"; done
  grep -A16 "^Per-phase" "/tmp/$name/table.md" 2>/dev/null | cut -c1-400
}
case "${1:-}" in
accuracy)
  suite eager8192 --workloads eagle-eager --methods none,full,cudaev,fullev \
    --eagle-args '--hidden 8192 --ffn 28672' --reps 2 --budget-s 250 --run-timeout-s 90
  suite graph --workloads eagle-graph --methods full,cudaev,fullev --reps 2 --budget-s 200 --run-timeout-s 60
  ;;
standing)
  suite standing --workloads eagle-graph --methods none,fullidle,idlenoov,idleoff,fullduty,dutynoov \
    --eagle-cycles 6000 --reps 3 --budget-s 540 --run-timeout-s 60
  ;;
hf)
  suite hf --workloads hf --methods none,full,fullduty,torchprof --reps 3 --budget-s 560 --run-timeout-s 120
  ;;
*)
  echo "usage: $0 accuracy|standing|hf" >&2
  exit 2
  ;;
esac
