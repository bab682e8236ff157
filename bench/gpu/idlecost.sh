#!/bin/bash
# What CUPTI costs a process while it traces nothing, split, on the launch-bound eager loop (where
# a microsecond per launch shows): the loop's tok/s per configuration, alternated, several reps.
# From the repository root, as root, on a GPU host with build/specprof and build/libspecprof_cupti.so.
#   bash bench/gpu/idlecost.sh [REPS] [CYCLES] [METHODS...]
# Methods: none; ebpf (--cupti off); full (--cupti on); idle (--cupti-duty 1ms/60s: one 1 ms window,
# then subscribed with nothing traced); idlenoov (idle without CUPTI's overhead records); idlek,
# idleapi (idle with only kernel records, or only API records, ever enabled); fullcb, idlecb (full
# and idle with the API records made in CUPTI's callbacks, SPECPROF_CUPTI_API_SOURCE=callbacks); injcb
# (subscribed, launch callbacks on, no kind ever enabled); inj (the library injected with no agent
# listening, no specprof: subscribed, only the graph-node callbacks, no kind; compare with none).
# GRAPHS=on runs the graph loop instead. Output under $OUT (default /tmp/idlecost): METHOD-REP.json
# (the workload's result), table.md.
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/idlecost}
reps=${1:-3} cycles=${2:-1500}
shift $(($# < 2 ? $# : 2))
methods=${*:-none ebpf full idle idlenoov injcb inj}
# PIN=1: pinned as in launchcost_h200.sh (pin.sh).
. "$(dirname "$0")/pin.sh"
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
sp() { # CUPTI on|off, extra specprof flags up to --, then the result file
  local cupti=$1 flags=()
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  "${A[@]}" build/specprof run -q --interval 0 --cupti "$cupti" --cupti-lib build/libspecprof_cupti.so \
    --preset sglang-eagle -o /tmp/idlecost-sp "${flags[@]}" -- \
    "${W[@]}" "$P" bench/gpu/spec_loop.py --worker sglang --graphs "${GRAPHS:-off}" --cycles "$cycles" \
    --noise-scale 0.0518613 --result "$1"
}
one() { # METHOD REP
  local res=$OUT/$1-$2.json
  case $1 in
  none) "${W[@]}" "$P" bench/gpu/spec_loop.py --worker sglang --graphs "${GRAPHS:-off}" --cycles "$cycles" \
    --noise-scale 0.0518613 --result "$res" ;;
  ebpf) sp off -- "$res" ;;
  full) sp on -- "$res" ;;
  idle) sp on --cupti-duty 1ms/60s -- "$res" ;;
  idlenoov) SPECPROF_CUPTI_KINDS=kernel,memcpy,memset,api,sync sp on --cupti-duty 1ms/60s -- "$res" ;;
  fullcb) SPECPROF_CUPTI_API_SOURCE=callbacks sp on -- "$res" ;;
  idlecb) SPECPROF_CUPTI_API_SOURCE=callbacks sp on --cupti-duty 1ms/60s -- "$res" ;;
  idlek) SPECPROF_CUPTI_KINDS=kernel sp on --cupti-duty 1ms/60s -- "$res" ;;
  idleapi) SPECPROF_CUPTI_KINDS=api sp on --cupti-duty 1ms/60s -- "$res" ;;
  injcb) SPECPROF_CUPTI_KINDS=none sp on -- "$res" ;;
  inj) CUDA_INJECTION64_PATH=$PWD/build/libspecprof_cupti.so SPECPROF_SOCKET=/nonexistent/specprof.sock \
    "${W[@]}" "$P" bench/gpu/spec_loop.py --worker sglang --graphs "${GRAPHS:-off}" --cycles "$cycles" \
    --noise-scale 0.0518613 --result "$res" ;;
  *) echo "unknown method $1" >&2; return 2 ;;
  esac > /dev/null 2>&1
  local rc=$?
  [ "$1" != none ] && [ "$1" != inj ] && cp /tmp/idlecost-sp/report.json "$OUT/report-$1-$2.json" 2>/dev/null
  return $rc
}
for r in $(seq 1 "$reps"); do
  for m in $methods; do one "$m" "$r" || echo "$m rep $r: rc $?"; done
done
{
  echo "idlecost: $(date -u '+%F %T') UTC, $reps reps, $cycles cycles, graphs ${GRAPHS:-off}, pinned ${PIN:-0}, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo
  "$P" - "$OUT" $methods <<'EOF'
import glob, json, os, statistics, sys
out, methods = sys.argv[1], sys.argv[2:]
tok, cyc = {}, {}
for m in methods:
    rs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, m + "-*.json")))]
    tok[m] = [r.get("tok_s") or 0 for r in rs]
    cyc[m] = [r.get("cycle_ms") or 0 for r in rs]
win = {}  # GPU windows and switches of each run: what the library did
for f in glob.glob(os.path.join(out, "report-*.json")):
    m = os.path.basename(f)[len("report-"):].rsplit("-", 1)[0]
    p = (json.load(open(f)).get("processes") or [{}])[0]
    g = p.get("gpu") or {}
    win.setdefault(m, []).append("%s/%s" % ((p.get("gpu_duty") or {}).get("windows", 0), g.get("lib_gpu_switches", 0)))
base = statistics.median(tok["none"]) if tok.get("none") else None
print("| method | runs | tok/s median | runs' tok/s | vs none | cycle ms median | windows/GPU switches |")
print("|---|---|---|---|---|---|---|")
for m in methods:
    v = tok[m]
    if not v:
        print(f"| {m} | 0 | — | — | — | — | — |")
        continue
    med = statistics.median(v)
    d = f"{(med / base - 1) * 100:+.1f} %" if base else "—"
    print(f"| {m} | {len(v)} | {med:.1f} | {' '.join(f'{x:.0f}' for x in v)} | {d} | {statistics.median(cyc[m]):.3f} | {' '.join(win.get(m, [])) or '—'} |")
EOF
} | tee "$OUT/table.md"
