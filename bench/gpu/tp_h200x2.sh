#!/bin/bash
# Issue 7 on an nvidia-h200-x2 machine, from the repository root, as root: a 2-rank smoke run
# (eager; with SMOKE_GRAPHS=1 also CUDA graphs; a hung rank prints its stacks), then
# bench/gpu/tp_run.py (results in $OUT/tp: tp.md, tp.json, tp-runs.tar.gz, jaeger-trace.json).
# Needs build/specprof, build/libspecprof_cupti.so and build/jaeger.xz (an xz-compressed Jaeger v2
# binary: cd internal/tools/jaeger && go build -ldflags '-s -w' -o ../../../build/jaeger
# github.com/jaegertracing/jaeger/cmd/jaeger && xz -k ../../../build/jaeger).
# Knobs: REPS (2), GRAPHS (on,off), CYCLES (1000), RUN_TIMEOUT (90 s per run).
set -u
OUT=${OUT:-/tmp/specprof-tp}
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
J=""
if [ -f build/jaeger.xz ]; then
  mkdir -p /tmp/j && python3 -c "import lzma,shutil;shutil.copyfileobj(lzma.open('build/jaeger.xz'),open('/tmp/j/jaeger','wb'))" &&
    chmod +x /tmp/j/jaeger && J="--jaeger /tmp/j/jaeger"
fi
S="python3 bench/gpu/spec_loop.py --worker sglang --tp-size 2 --cycles 50 --noise-scale 0.051861341918379274 --master-port 0 --hang-dump-s 45"
timeout -k 5 60 $S --graphs off --result /tmp/e.json > /tmp/e.log 2>&1; echo "eager smoke rc $?"; tail -25 /tmp/e.log | cut -c1-300
G=${GRAPHS:-on,off}
if [ "${SMOKE_GRAPHS:-0}" = 1 ]; then
  timeout -k 5 60 $S --graphs on --result /tmp/g.json > /tmp/g.log 2>&1; rc=$?; echo "graph smoke rc $rc"
  tail -25 /tmp/g.log | cut -c1-300
  [ $rc = 0 ] || G=off
fi
pkill -9 -f spec_loop.py; sleep 1
python3 bench/gpu/tp_run.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so $J --out "$OUT/tp" \
  --reps "${REPS:-2}" --cycles "${CYCLES:-1000}" --graphs "$G" --run-timeout-s "${RUN_TIMEOUT:-90}" 2>&1 | tail -60 | cut -c1-400
ls "$OUT/tp"
