#!/bin/bash
# The injected CUPTI library's exit paths under load on a CUDA host (issue "Never harm the server",
# item 6): a torch process exits while kernel records are in flight, after CUDA's own teardown,
# without atexit, by an exception, while specprof is stopped (the library's sender blocked), after
# specprof was killed, and with no agent at all. RUNS runs of each; every run must end (no hang),
# exit as the workload means to (0, or 1 for 'raise'), print the untraced checksum, and leave no
# process stopped. Results: $OUT/exitpaths.txt (one line per run, then a table). From the
# repository root, as root; needs build/specprof and build/libspecprof_cupti.so.
set -u
OUT=${OUT:-/tmp/specprof-exitpaths}
PY=${PY:-/opt/torch/.venv/bin/python3}
RUNS=${RUNS:-20}
PAR=${PAR:-4}
B=$(readlink -f build/specprof)
LIB=$(readlink -f build/libspecprof_cupti.so)
W=$(mktemp -d)
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
R="$OUT/exitpaths.txt"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
} > "$R" 2>&1
X=$(readlink -f bench/gpu/exitload.py)
want=$("$PY" "$X" --how ctxreset | grep checksum)
echo "untraced: $want" >> "$R"

# one SCENARIO RUN: prints "scenario run outcome rc checksum-ok"
one() {
  local sc=$1 i=$2 d="$W/$1-$2" how=inflight mode=run fault=none
  mkdir -p "$d"
  case $sc in
    inflight|ctxreset|osexit|raise) how=$sc ;;
    stopped) fault=stop ;;
    killed) fault=kill ;;
    noagent) mode=noagent ;;
  esac
  local want_rc=0; [ "$how" = raise ] && want_rc=1
  # sh records the workload's exit status, whatever happens to specprof.
  local cmd="$PY $X --how $how; echo rc=\$? > $d/rc"
  if [ $mode = noagent ]; then
    CUDA_INJECTION64_PATH=$LIB SPECPROF_SOCKET=$d/nobody.sock timeout 300 sh -c "$cmd" > "$d/out" 2>&1
  else
    "$B" run -q --interval 0 --cupti on --cupti-lib "$LIB" --spec-metrics off -o "$d/o" -- sh -c "$cmd" > "$d/out" 2>&1 &
    local sp=$!
    if [ $fault != none ]; then
      for _ in $(seq 600); do grep -q checksum "$d/out" 2>/dev/null && break; sleep 0.05; done
      [ $fault = stop ] && kill -STOP $sp
      [ $fault = kill ] && kill -KILL $sp
    fi
    for _ in $(seq 2400); do [ -s "$d/rc" ] && break; sleep 0.1; done
    [ $fault = stop ] && { kill -KILL $sp; }
    wait $sp 2>/dev/null
  fi
  local rc=hang; [ -s "$d/rc" ] && rc=$(sed 's/rc=//' "$d/rc")
  local ok=no; grep -q "$want" "$d/out" && ok=yes
  local outcome=ok pid
  pid=$(sed -n 's/^exitload pid //p' "$d/out" | head -1)
  if [ "$rc" = hang ]; then outcome="hang(state=$( [ -n "$pid" ] && ps -o stat= -p "$pid"))"; elif [ "$rc" -ge 128 ]; then outcome=crash; elif [ "$rc" != $want_rc ]; then outcome=bad-exit; elif [ $ok = no ]; then outcome=bad-output; fi
  echo "$sc $i $outcome rc=$rc checksum=$ok"
}
export -f one
export W PY X B LIB want
for sc in inflight ctxreset osexit raise stopped killed noagent; do
  for i in $(seq "$RUNS"); do echo "$sc $i"; done
done | xargs -P "$PAR" -n 2 bash -c 'one "$0" "$1"' >> "$R.runs"
sort -k1,1 -k2n "$R.runs" >> "$R"
echo "--- scenario: runs, outcomes" >> "$R"
awk '{n[$1]++; o[$1" "$3]++} END {for (k in o) print k, o[k]}' "$R.runs" | sort >> "$R"
rm -f "$R.runs"
tar -czf "$OUT/exitpaths.tar.gz" -C "$W" . 2>/dev/null
echo done >> "$R"
