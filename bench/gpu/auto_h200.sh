#!/bin/bash
# --mode auto (specprof's defaults) against untraced runs, interleaved in one call, on the graph
# loop (eagle-graph, ~1.4 ms cycles) and HF assisted generation. HF's measured loop is made three
# passes long so that the snapshot windows that open after warm-up fall in it; the suite counts
# GPU figures only for cycles inside the measured loop (gpu_n in table.md).
#   OUT=$OUT bash bench/gpu/auto_h200.sh        # from the repository root, as root, build/ built
#   OUT=$OUT REPS=2 CYCLES=20000 PASSES=8 bash bench/gpu/auto_h200.sh   # longer measured loops
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/specprof-auto}
REPS=${REPS:-3}
CYCLES=${CYCLES:-3000}   # graph-loop cycles in the measured loop (~1.4 ms each)
PASSES=${PASSES:-3}      # HF passes in the measured loop
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
$P bench/gpu/suite.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --python "$P" \
  --out /tmp/auto --export "$OUT/auto" --workloads eagle-graph,hf --methods none,auto --reps "$REPS" \
  --eagle-cycles "$CYCLES" --hf-args "--loop-passes $PASSES" --budget-s "${BUDGET:-520}" --run-timeout-s 120 \
  > /tmp/auto.log 2>&1
echo "auto: rc $?"
tail -4 /tmp/auto.log
cp /tmp/auto.log "$OUT/auto.log"
grep -B2 -A30 "^| method" /tmp/auto/table.md | head -80
