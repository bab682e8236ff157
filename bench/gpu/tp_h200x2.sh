#!/bin/bash
# Issue 7 on an nvidia-h200-x2 machine, from the repository root, as root: a 2-rank smoke (eager,
# then CUDA graphs; a hung rank prints its stacks), then bench/gpu/tp_run.py (results in $OUT/tp).
# Needs build/specprof, build/libspecprof_cupti.so and build/jaeger.xz (an xz-compressed Jaeger v2).
OUT=${OUT:-/tmp/specprof-tp}
set -u; mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/j && python3 -c "import lzma,shutil;shutil.copyfileobj(lzma.open('build/jaeger.xz'),open('/tmp/j/jaeger','wb'))" && chmod +x /tmp/j/jaeger
S="python3 bench/gpu/spec_loop.py --worker sglang --tp-size 2 --cycles 50 --noise-scale 0.051861341918379274 --master-port 0 --hang-dump-s 60"
timeout -k 5 80 $S --graphs off --result /tmp/e.json > /tmp/e.log 2>&1; echo "eager smoke rc $?"; tail -25 /tmp/e.log | cut -c1-300
G=off
timeout -k 5 80 $S --graphs on --result /tmp/g.json > /tmp/g.log 2>&1; rc=$?; echo "graph smoke rc $rc"; tail -25 /tmp/g.log | cut -c1-300
[ $rc = 0 ] && G=on,off
pkill -9 -f spec_loop.py; sleep 1
timeout -k 5 330 python3 bench/gpu/tp_run.py --specprof build/specprof --cupti-lib build/libspecprof_cupti.so --jaeger /tmp/j/jaeger --out $OUT/tp --reps 1 --cycles 1000 --graphs $G --run-timeout-s 90 2>&1 | tail -60 | cut -c1-400
ls $OUT/tp
