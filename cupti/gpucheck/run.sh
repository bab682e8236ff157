#!/bin/sh
# libspecprof_cupti.so on a real GPU: layout check, record check and overhead.
#
#   cupti/gpucheck/run.sh            (from the repository root, on the CUDA host)
#
# Needs build/libspecprof_cupti.so and build/recvtool (built here when go/gcc exist, else carry
# them: `make cupti && go build -o build/recvtool ./cupti/internal/recvtool`), CUDA 13.0 headers
# for the layout check, and a torch Python (PY, default /opt/torch/.venv/bin/python3).
# Prints, per mode (eager launches / graph replays): wall time without injection, injected with
# no agent, injected with an agent (recvtool), and recvtool's report (counts, library counters,
# the clock invariant "no kernel starts before its launching API call").
set -eu
PY=${PY:-/opt/torch/.venv/bin/python3}
N=${N:-20000}
root=$(pwd)
lib=$root/build/libspecprof_cupti.so
tool=$root/build/recvtool
command -v gcc >/dev/null && make -s cupti
command -v go >/dev/null && go build -o "$tool" ./cupti/internal/recvtool
[ -x "$tool" ] && [ -f "$lib" ] || { echo "run.sh: need $lib and $tool" >&2; exit 2; }

echo "== layout check"
sh cupti/layoutcheck/run.sh || echo "LAYOUT CHECK FAILED"

sock=/tmp/specprof-gpucheck-$$.sock
wall() { "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["wall_s"])'; }
for mode in eager graph; do
    echo "== $mode ($N iterations x 20 kernels)"
    for rep in 1 2 3; do
        plain=$(CUDA_INJECTION64_PATH= "$PY" cupti/gpucheck/torch_bench.py "$mode" "$N" | wall)
        noagent=$(CUDA_INJECTION64_PATH="$lib" SPECPROF_SOCKET=/tmp/nobody-$$.sock \
            "$PY" cupti/gpucheck/torch_bench.py "$mode" "$N" | wall)
        "$tool" -socket "$sock" -exit-after-conns 1 > /tmp/recvtool-$$.txt 2>/dev/null &
        rpid=$!
        sleep 1
        agent=$(CUDA_INJECTION64_PATH="$lib" SPECPROF_SOCKET="$sock" \
            "$PY" cupti/gpucheck/torch_bench.py "$mode" "$N" | wall)
        wait "$rpid" || true
        echo "rep $rep: plain ${plain}s  injected-no-agent ${noagent}s  injected-with-agent ${agent}s"
    done
    cat /tmp/recvtool-$$.txt
done

echo "== SGLang-shaped workload on the real driver (graph mode), with an agent"
"$tool" -socket "$sock" -exit-after-conns 1 > /tmp/recvtool-$$.txt 2>&1 &
rpid=$!
sleep 1
CUDA_INJECTION64_PATH="$lib" SPECPROF_SOCKET="$sock" "$PY" testdata/workloads/sglang_demo.py \
    --cycles 200 --mode graph --extra-thread | tail -c 300
wait "$rpid" || true
cat /tmp/recvtool-$$.txt
rm -f /tmp/recvtool-$$.txt
