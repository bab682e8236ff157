#!/bin/bash
# specprof on a real GPU host (the H200 rung). From the repository root, as root:
#   bench/gpu/run.sh            (results in $OUT, default /tmp/specprof-gpu)
# Needs build/specprof, build/agent.test (go test -c -o build/agent.test ./agent),
# build/libspecprof_cupti.so and build/recvtool, built on a machine with Go (make bench-gpu-build),
# and a Python with torch (PY, default python3).
set -u
OUT=${OUT:-/tmp/specprof-gpu}
PY=${PY:-python3}
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PY" -c "import torch, sys, platform; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('python', sys.version.split()[0]); print('kernel', platform.release())"
} > "$OUT/versions.txt" 2>&1

B=build/specprof
# 1. Phase attribution (eBPF only) and GPU records (eBPF + CUPTI) on a torch speculative loop,
#    CUDA graphs on and off; phases checked against the loop's own windows (same clock), GPU records
#    against the clock rule, graph correlation and torch.profiler's kernel count (separate run);
#    tok/s without specprof, with eBPF only and with eBPF + CUPTI, alternated, 2 rounds.
LIB=build/libspecprof_cupti.so
for g in on off; do
  f="$OUT/phases-graphs-$g.txt"
  : > "$f"
  for r in 1 2; do
    echo "round $r plain: $("$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles 300)" >> "$f"
    "$B" run -q --force --interval 0 --cupti off --rules bench/gpu/spec_loop.yaml -o "/tmp/ph-$g" --events "/tmp/ev-$g.jsonl" -- \
      "$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles 300 --windows "/tmp/win-$g.json" > "/tmp/ph-$g.txt" 2>&1
    echo "round $r ebpf: $(grep tok_s /tmp/ph-$g.txt)" >> "$f"
    "$B" run -q --force --interval 0 --cupti on --cupti-lib "$LIB" --rules bench/gpu/spec_loop.yaml -o "/tmp/cu-$g" --events "/tmp/cev-$g.jsonl" -- \
      "$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles 300 --windows "/tmp/cwin-$g.json" > "/tmp/cu-$g.txt" 2>&1
    echo "round $r ebpf+cupti: $(grep tok_s /tmp/cu-$g.txt)" >> "$f"
  done
  echo "--- eBPF-only run:" >> "$f"; grep -v tok_s "/tmp/ph-$g.txt" >> "$f"
  "$PY" bench/gpu/check_phases.py "/tmp/ev-$g.jsonl" "/tmp/win-$g.json" >> "$f" 2>&1; echo "phase check exit: $?" >> "$f"
  echo "--- eBPF + CUPTI run:" >> "$f"; grep -v tok_s "/tmp/cu-$g.txt" >> "$f"
  "$PY" bench/gpu/check_phases.py "/tmp/cev-$g.jsonl" "/tmp/cwin-$g.json" >> "$f" 2>&1; echo "phase check exit: $?" >> "$f"
  prof=$("$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles 300 --profile | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["profiler_kernels"])')
  "$PY" bench/gpu/check_cupti.py "/tmp/cev-$g.jsonl" "/tmp/cwin-$g.json" "$prof" >> "$f" 2>&1; echo "cupti check exit: $?" >> "$f"
  echo "--- per-phase GPU time: specprof vs CUDA events (separate run):" >> "$f"
  "$PY" bench/gpu/spec_loop.py --graphs "$g" --cycles 300 --cuda-events > "/tmp/evt-$g.json"
  "$PY" bench/gpu/compare_gpu_time.py "/tmp/cu-$g/report.json" "/tmp/evt-$g.json" >> "$f" 2>&1
done
"$B" run -q --interval 0 -o "$OUT/sglang" -- "$PY" testdata/workloads/sglang_demo.py --cycles 200 --mode graph --extra-thread \
  > "$OUT/sglang-shaped.txt" 2>&1

# 2. Added cost per hooked launch (torch elementwise launches), vs no probe and an empty probe.
(cd agent && SPECPROF_BENCH_BACKEND=torch SPECPROF_BENCH_PYTHON="$PY" ../build/agent.test \
  -test.run '^$' -test.bench BenchmarkLaunchCost -test.benchtime 1x -test.v) > "$OUT/launch-cost.txt" 2>&1

# 3. The injected CUPTI library on its own: layouts against CUDA 13's headers, records, overhead
#    (skip with CUPTI_GPUCHECK=0).
if [ "${CUPTI_GPUCHECK:-1}" = 1 ]; then
  PY="$PY" N=${N:-5000} sh cupti/gpucheck/run.sh > "$OUT/cupti-gpucheck.txt" 2>&1
fi
echo done
