#!/bin/bash
# Added cost per eager launch, per method, alternated (bench/gpu/launchcost.py): from the
# repository root, as root, on a GPU host with build/specprof and build/libspecprof_cupti.so.
#   bash bench/gpu/launchcost_h200.sh [REPS] [DEPTH] [METHODS...]
# Methods: none, ebpf (specprof --cupti off), full (--cupti on), torchprof (torch.profiler), and
# full's parts: idle (subscribed, a 1 ms window a minute), kapi (kernel and API records only), noapi
# (no API records: the agent cannot join then; what the API records cost), apiall (every API call's
# record). What idle's standing cost is made of: idlenoov (idle without CUPTI's overhead records),
# injcb (subscribed, launch callbacks on, no kind ever enabled), inj (the library injected with no
# agent listening, no specprof: subscribed, only the graph-node callbacks, no kind; compare with
# none). cbapi: full with the API records made in CUPTI's callbacks
# (SPECPROF_CUPTI_API_SOURCE=callbacks).
# Output under $OUT (default /tmp/launchcost): METHOD-REP.json per run, table.md.
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/launchcost}
reps=${1:-3} depth=${2:-40}
shift $(($# < 2 ? $# : 2))
methods=${*:-none ebpf full torchprof}
# PIN=1 (pin.sh): the workload on one physical core, specprof and everything else on the others.
. "$(dirname "$0")/pin.sh"
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
sp() { # CUPTI on|off, extra specprof flags up to --, then the launchcost flags
  local cupti=$1 flags=()
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  "${A[@]}" build/specprof run -q --interval 0 --cupti "$cupti" --cupti-lib build/libspecprof_cupti.so \
    --preset hf-assisted -o "/tmp/launchcost-sp" "${flags[@]}" -- "${W[@]}" "$P" bench/gpu/launchcost.py --depth "$depth" "$@"
}
one() { # METHOD REP
  local r=$2 res=(--result "$OUT/$1-$2.json")
  case $1 in
  none) "${W[@]}" "$P" bench/gpu/launchcost.py --depth "$depth" "${res[@]}" ;;
  torchprof) "${W[@]}" "$P" bench/gpu/launchcost.py --depth "$depth" --torch-profiler "${res[@]}" ;;
  ebpf) sp off -- "${res[@]}" ;;
  full) sp on -- "${res[@]}" ;;
  idle) sp on --cupti-duty 1ms/60s -- "${res[@]}" ;;
  kapi) SPECPROF_CUPTI_KINDS=kernel,api sp on -- "${res[@]}" ;;
  noapi) SPECPROF_CUPTI_KINDS=kernel,memcpy,memset,sync,overhead sp on -- "${res[@]}" ;;
  apiall) SPECPROF_CUPTI_API=all sp on -- "${res[@]}" ;;
  idlenoov) SPECPROF_CUPTI_KINDS=kernel,memcpy,memset,api,sync sp on --cupti-duty 1ms/60s -- "${res[@]}" ;;
  injcb) SPECPROF_CUPTI_KINDS=none sp on -- "${res[@]}" ;;
  cbapi) SPECPROF_CUPTI_API_SOURCE=callbacks sp on -- "${res[@]}" ;;
  inj) CUDA_INJECTION64_PATH=$PWD/build/libspecprof_cupti.so SPECPROF_SOCKET=/nonexistent/specprof.sock \
    "${W[@]}" "$P" bench/gpu/launchcost.py --depth "$depth" "${res[@]}" ;;
  *) echo "unknown method $1" >&2; return 2 ;;
  esac > /dev/null
}
for r in $(seq 1 "$reps"); do
  for m in $methods; do one "$m" "$r" || echo "$m rep $r: rc $?"; done
done
{
  echo "launchcost: $(date -u '+%F %T') UTC, $reps reps, depth $depth, pinned ${PIN:-0}, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo
  "$P" bench/gpu/launchcost.py --table "$OUT"
} | tee "$OUT/table.md"
