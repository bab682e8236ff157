#!/bin/bash
# The H200 verification of the join (issues 3 and 4) in one short call, from the repository root,
# as root: CUPTI records joined to eBPF launches on the real driver (system thread ids, nested
# runtime/driver records), per-phase GPU time against CUDA events, torch.profiler's kernel count,
# and the launch cost. Results go to $OUT (default /tmp/specprof-verify) as one tarball plus
# summary.txt. Needs build/specprof, build/libspecprof_cupti.so, build/agent.test.
set -u
OUT=${OUT:-/tmp/specprof-verify}
PY=${PY:-/opt/torch/.venv/bin/python3}
W=$(mktemp -d)
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
S="$OUT/summary.txt"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
} > "$S" 2>&1
B=build/specprof
LIB=build/libspecprof_cupti.so
CYC=${CYC:-300}
for g in on off; do
  echo "=== graphs $g" >> "$S"
  "$B" run -q --interval 0 --cupti on --cupti-lib "$LIB" --cpu-hz 0 --pprof=false --perfetto=false --cycles-jsonl \
    --rules bench/gpu/spec_loop.yaml -o "$W/cu-$g" --events "$W/cev-$g.jsonl" -- \
    "$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles "$CYC" --windows "$W/cwin-$g.json" > "$W/cu-$g.txt" 2>&1
  echo "specprof exit $?" >> "$S"
  grep -E "tok_s|GPU join|launches without|dropped" "$W/cu-$g.txt" >> "$S"
  "$PY" bench/gpu/check_phases.py "$W/cev-$g.jsonl" "$W/cwin-$g.json" >> "$S" 2>&1; echo "phase check exit: $?" >> "$S"
  # torch.profiler lists a CUDA graph's copy nodes as kernels (memcpy32_post ...); CUPTI reports
  # them as copies: leave them out of the profiler's kernel count.
  prof=$("$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles "$CYC" --profile | "$PY" -c 'import json,re,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d["profiler_kernels"] - sum(v for k, v in d["profiler_names"].items() if re.match(r"mem(cpy|set)\d*_", k)))')
  "$PY" bench/gpu/check_cupti.py "$W/cev-$g.jsonl" "$W/cwin-$g.json" "$prof" >> "$S" 2>&1; echo "cupti check exit: $?" >> "$S"
  "$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles "$CYC" --cuda-events > "$W/evt-$g.json" 2>> "$S"
  "$PY" bench/gpu/compare_gpu_time.py "$W/cu-$g/report.json" "$W/evt-$g.json" "$W/cu-$g/cycles.jsonl" "$W/cwin-$g.json" >> "$S" 2>&1; echo "gpu time check exit: $?" >> "$S"
done
if [ "${LAUNCH_COST:-1}" = 1 ]; then
  (cd agent && SPECPROF_BENCH_BACKEND=torch SPECPROF_BENCH_PYTHON="$PY" ../build/agent.test \
    -test.run '^$' -test.bench BenchmarkLaunchCost -test.benchtime 1x -test.v) > "$W/launch-cost.txt" 2>&1
  grep -E "depth|attributed" "$W/launch-cost.txt" >> "$S"
fi
tar -czf "$OUT/verify.tar.gz" -C "$W" . 2>/dev/null
echo done >> "$S"
