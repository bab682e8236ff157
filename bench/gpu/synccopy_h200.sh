#!/bin/bash
# Sync wait in copies, and copies/sets as launches (h200.md §23), in one device call from the
# repository root, as root. Needs build/specprof, build/libspecprof_cupti.so, build/apisurvey.
# PART=survey: the driver entry points of torch's copies, sets and syncs (bench/gpu/apisurvey):
#   every matching libcuda export, entry + return probes; then CUPTI's view (torch.profiler).
# PART=loop: the graph EAGLE loop under specprof with CUDA events and .tolist() timed in the same
#   run, checked by synccopy_check.py.
set -u
OUT=${OUT:-/tmp/specprof-synccopy}
PY=${PY:-/opt/torch/.venv/bin/python3}
PART=${PART:-survey loop}
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
for part in $PART; do
  case $part in
  survey)
    build/apisurvey -json "$OUT/survey.json" -- "$PY" bench/gpu/apisurvey/ops.py --reps 200 > "$OUT/survey.txt" 2> "$OUT/survey.err"
    echo "survey exit $?" >> "$OUT/survey.txt"
    # Every libcuda export: an entry point outside the pattern shows up here.
    build/apisurvey -match '^cu' -json "$OUT/survey-all.json" -- "$PY" bench/gpu/apisurvey/ops.py --reps 50 > "$OUT/survey-all.txt" 2> "$OUT/survey-all.err"
    echo "survey-all exit $?" >> "$OUT/survey-all.txt"
    "$PY" bench/gpu/apisurvey/ops.py --profile --reps 20 > "$OUT/cupti-view.txt" 2> "$OUT/cupti-view.err"
    echo "profile exit $?" >> "$OUT/cupti-view.txt"
    ;;
  loop)
    CYC=${CYC:-400}
    for rep in ${REPS:-1}; do
      d="$OUT/loop$rep"
      rm -rf "$d"
      build/specprof run -q --interval 0 --cupti on --cupti-lib build/libspecprof_cupti.so --preset sglang-eagle \
        -o "$d" --cycles-jsonl --events "$d.events.jsonl" -- \
        "$PY" bench/gpu/spec_loop.py --worker sglang --graphs on --cycles "$CYC" --timing cuda-events \
        --time-tolist --noise-scale ${NOISE:-0.125} --result "$OUT/loop$rep.result.json" > "$OUT/loop$rep.txt" 2>&1
      echo "specprof exit $?" >> "$OUT/loop$rep.txt"
      "$PY" bench/gpu/synccopy_check.py "$d" "$OUT/loop$rep.result.json" > "$OUT/loop$rep.check.txt" 2>&1
      echo "check exit $?" >> "$OUT/loop$rep.check.txt"
      # Which APIs the accept phase called, and how long each sync took (the event log).
      "$PY" - "$d.events.jsonl" >> "$OUT/loop$rep.check.txt" 2>&1 <<'PYEOF'
import collections, json, sys
calls, waits = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    k = (e.get("phase"), e.get("kind"), e.get("api"))
    calls[k] += 1
    waits[k] += e.get("wait_ns") or 0
print("events (phase, kind, api): calls, wait ms")
for k, c in sorted(calls.items(), key=lambda kv: -kv[1])[:40]:
    print("  %-70s %8d %10.2f" % (k, c, waits[k] / 1e6))
PYEOF
      gzip -f "$d.events.jsonl"
      tar -czf "$OUT/loop$rep.tar.gz" -C "$OUT" "loop$rep" && rm -rf "$d"
    done
    ;;
  esac
done
ls -la "$OUT"
