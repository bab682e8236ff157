#!/bin/bash
# Where duty-cycled runs lose joins (launches inside a tracing window whose CUPTI API record never
# came): one graph-loop run per variant, specprof with -v, which logs the first such launches with
# their place in the window and, at the end, how many fell in each tenth of their window. From the
# repository root, as root, on a GPU host with build/specprof and build/libspecprof_cupti.so.
#   bash bench/gpu/joinloss.sh [CYCLES] [VARIANT...]
# Variants (all --cupti-duty 100ms/1s unless named): duty (as shipped); gpuonly (only the GPU kinds
# follow the windows: API records all the time); apionly (only the API and sync records follow the
# windows: the GPU kinds stay on, nothing switched on application threads); short (2ms/10ms); full
# (no windows: the control).
# Output under $OUT (default /tmp/joinloss): VARIANT-report.json, VARIANT-debug.txt, summary.txt.
set -u
P=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/joinloss}
cycles=${1:-3000}
shift $(($# < 1 ? $# : 1))
variants=${*:-duty gpuonly apionly full}
mkdir -p "$OUT"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
for v in $variants; do
  env=() flags=(--cupti-duty 100ms/1s)
  case $v in
  duty) ;;
  gpuonly) env=(SPECPROF_CUPTI_DUTY_KINDS=kernel,memcpy,memset) ;;
  apionly) env=(SPECPROF_CUPTI_DUTY_KINDS=api,sync) ;;
  short) flags=(--cupti-duty 2ms/10ms) ;;
  full) flags=() ;;
  *) echo "unknown variant $v" >&2; continue ;;
  esac
  d=/tmp/joinloss-$v
  rm -rf "$d"
  mkdir -p "$d"
  env "${env[@]}" SPECPROF_CUPTI_DEBUG=1 build/specprof run -v -q --interval 0 --cupti on \
    --cupti-lib build/libspecprof_cupti.so --preset sglang-eagle -o "$d/sp" "${flags[@]}" -- \
    "$P" bench/gpu/spec_loop.py --worker sglang --graphs on --cycles "$cycles" --noise-scale 0.0518613 \
    --result "$d/result.json" > "$d/stdout.txt" 2> "$d/stderr.txt"
  echo "$v: rc $?" | tee -a "$OUT/summary.txt"
  grep -a "without CUPTI API record\|specprof-cupti" "$d/stderr.txt" | grep -v "probes attached" | head -60 > "$OUT/$v-debug.txt"
  [ -f "$d/sp/report.json" ] && cp "$d/sp/report.json" "$OUT/$v-report.json" &&
    "$P" - "$d/sp/report.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
l = {k: v for k, v in (r.get("loss") or {}).items() if v}
for p in r.get("processes") or []:
    g = p.get("gpu") or {}
    print("  duty %s; switches %s; threads %s" % (p.get("gpu_duty"), g.get("lib_gpu_switches"),
          [(t.get("tid"), t.get("cycles"), t.get("cycles_outside_gpu_windows"), t.get("cycles_gpu_partial"),
           t.get("cycles_gpu_incomplete")) for t in p.get("threads") or []]))
    for t in p.get("threads") or []:
        print("  tid %s kernels per GPU cycle: %s" % (t.get("tid"), ", ".join("%s %s/%.1f" % (
            ph["phase"], ph.get("gpu_cycles") or 0, (ph.get("gpu_kernels") or 0) / max(1, ph.get("gpu_cycles") or 0))
            for ph in t.get("phases") or [])))
print("  loss %s" % l)
EOF
  grep -a "by tenth" "$OUT/$v-debug.txt" | tee -a "$OUT/summary.txt"
done
