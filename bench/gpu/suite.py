#!/usr/bin/env python3
"""specprof's GPU benchmark suite (issue 6): real speculative decoding on a GPU, profiled by
specprof and by the alternatives, interleaved in one run.

Workloads (random weights, fixed seed, greedy, no downloads):
  hf           Hugging Face transformers assisted generation, ~1.1 B Llama target, ~0.25 B draft,
               eager (bench/gpu/hf_assisted.py; specprof preset hf-assisted)
  eagle-graph  SGLang-shaped EAGLE loop, draft / verify / draft-extend in CUDA graphs, host sync
               on the accepted tokens (bench/gpu/spec_loop.py --worker sglang; preset sglang-eagle)
  eagle-eager  the same loop without CUDA graphs

Methods, one process per run, interleaved: every repetition runs each method once per workload,
in an order rotated by one at each repetition (A B C ... G, then B C ... G A, ...):
  none       (a) nothing
  ebpf       (b) specprof run --cupti off
  full       (c) specprof run --cupti on (eBPF + the injected CUPTI library)
  torchprof  (d) torch.profiler (CPU + CUDA activities) around the measured loop, record_function
                 ranges around the phases; GPU time per phase from the exported trace
  v3         (e) timers with torch.cuda.synchronize() around draft / verify / accept / extend
  v4         (f) wall-clock timers around the same phases, no sync
  cudaev     (g) CUDA events around the same phases: the ground truth of per-phase GPU time
Before the repetitions, one calibration run per model family fixes the strength of the target's
extra layers (acceptance ~2-4 tokens per cycle); every run gets that value, so all runs of a
workload generate the same tokens (checked by hash).

Outputs (--out, default bench/gpu/results/<UTC date>; appended to when it exists):
  raw.csv      one row per run (appended and flushed after every run)
  phases.csv   per-phase times, long format (run, phase, metric, ms)
  table.md     the tables (rewritten after every run, so a timeout still leaves data)
  versions.txt driver, CUDA, torch, transformers, Python, kernel
  runs/<id>/   each run's stdout, stderr, result.json and specprof report

Usage (repository root, as root, build/specprof and build/libspecprof_cupti.so present):
  python3 bench/gpu/suite.py --specprof build/specprof [--budget-s 500] [--workloads hf,...]
  make bench-gpu PYTHON=/opt/torch/.venv/bin/python3 BENCH_GPU_ARGS='--budget-s 500'
--dry-run replaces every workload with a trivial Python command (no torch, no GPU) to check the
driver itself (bench/gpu/test_suite_dryrun.py).
"""

import argparse
import csv
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

METHODS = ["none", "ebpf", "full", "torchprof", "v3", "v4", "cudaev"]
# Variants of (c) that split its cost (not run unless named in --methods): every CUPTI API record
# (SPECPROF_CUPTI_API=all, the library's filter off), and the tracer alone without the CPU
# sampler and the pprof/Perfetto outputs (which keep every GPU record).
# fullidle and ebpflean split the standing cost: the injected library connected with GPU tracing
# almost never on (1 ms a minute), and the eBPF tracer without the sampler and the exports.
# fullev: specprof full on a run that also records the CUDA events of (g): specprof's GPU elapsed
# time against the events of the same run (same GPU timeline).
# idlenoov, idleoff and dutynoov split the library's standing cost further: fullidle without
# CUPTI's OVERHEAD activity kind (on outside the windows), fullidle with the library injected but
# switched off before it subscribes to CUPTI (SPECPROF_CUPTI_DISABLE=1), fullduty without OVERHEAD.
# fulldetach, fulldetachlong and idledetach: fullduty, fulldutylong and fullidle limited to a few
# windows (--cupti-windows), after which CUPTI is detached for good (--cupti-detach).
# fullcb, dutycb: (c) and (c4) with the API records made by the library in CUPTI's callbacks
# (SPECPROF_CUPTI_API_SOURCE=callbacks) instead of CUPTI's API activity kinds.
# ebpfwin: (b) with the probes in place only in windows (--probe-duty). probedetach: the sampled
# mode for launch-bound loops: the probes held while CUPTI traces a few windows, CUPTI then
# detached, and the probes in windows from then on.
# graphquiet, graphunsub: 3 windows of (c4), then the detach of a process that built CUDA graphs (not
# finalized, h200.md §11): every CUPTI callback off, and (graphunsub) the subscription dropped too
# (SPECPROF_CUPTI_GRAPH_DETACH=unsubscribe). (c21), a finalize when no graph was built while traced,
# broke the graph loop in 3 of 3 runs (h200.md §21a) and is gone from the library.
# probecycles: probedetach with 4 GPU windows of 500ms/4s that open only on decode cycles
# (--cupti-duty-start cycles): with HF's loop made long (--hf-args "--loop-passes N"), the last ones
# fall in the measured loop, so its cycles get GPU figures.
EXTRA_METHODS = ["fullall", "fulllean", "fullduty", "fullgraph", "fulldutylong", "fullidle", "ebpflean", "fullev",
                 "idlenoov", "idleoff", "dutynoov", "fulldetach", "fulldetachlong", "idledetach",
                 "fullcb", "dutycb", "ebpfwin", "probedetach", "graphquiet", "graphunsub", "probecycles", "auto"]
# The probe windows of ebpfwin and probedetach: a 2.5 % share, what 0.5 % on HF needs (h200.md §18d).
PROBE_DUTY = "250ms/10s"
LABEL = {
    "none": "(a) none",
    "ebpf": "(b) specprof eBPF only",
    "full": "(c) specprof eBPF + CUPTI",
    "torchprof": "(d) torch.profiler",
    "v3": "(e) v3: sync timers",
    "v4": "(f) v4: wall timers, no sync",
    "cudaev": "(g) CUDA events (ground truth)",
    "fullall": "(c2) specprof full, every CUPTI API record",
    "fulllean": "(c3) specprof full, no CPU sampler, no pprof/Perfetto",
    "fullduty": "(c4) specprof full, GPU tracing in windows (--cupti-duty 100ms/1s; HF 500ms/5s)",
    "fullgraph": "(c5) specprof full, graph-level tracing of graph replays (--cupti-graphs graph)",
    "fulldutylong": "(c6) specprof full, GPU tracing in longer windows (--cupti-duty 500ms/5s)",
    "fullidle": "(c7) specprof full, GPU tracing 1 ms a minute (--cupti-duty 1ms/60s): the library's standing cost",
    "ebpflean": "(b2) specprof eBPF only, no CPU sampler, no pprof/Perfetto",
    "fullev": "(c8) specprof full + CUDA events in the same run",
    "idlenoov": "(c9) as (c7), without CUPTI's OVERHEAD records",
    "idleoff": "(c10) as (c7), the library injected but not subscribed to CUPTI",
    "dutynoov": "(c11) as (c4), without CUPTI's OVERHEAD records",
    "fulldetach": "(c12) as (c4), 6 windows, then CUPTI detached (--cupti-windows 6 --cupti-detach)",
    "fulldetachlong": "(c13) as (c6), 2 windows, then CUPTI detached (--cupti-windows 2 --cupti-detach)",
    "idledetach": "(c14) as (c7), 1 window, then CUPTI detached (--cupti-windows 1 --cupti-detach)",
    "fullcb": "(c16) as (c), API records made in CUPTI's callbacks (SPECPROF_CUPTI_API_SOURCE=callbacks)",
    "dutycb": "(c17) as (c4), API records made in CUPTI's callbacks",
    "ebpfwin": "(b3) specprof eBPF only, probes in windows (--probe-duty %s)" % PROBE_DUTY,
    "probedetach": "(c18) GPU tracing in 2 windows (probes held), CUPTI detached, then probes in windows (--probe-duty %s)" % PROBE_DUTY,
    "graphquiet": "(c19) as (c4), 3 windows, then CUPTI's callbacks off, not finalized (--cupti-windows 3 --cupti-detach)",
    "graphunsub": "(c20) as (c19), and CUPTI unsubscribed (SPECPROF_CUPTI_GRAPH_DETACH=unsubscribe)",
    "probecycles": "(c22) as (c18), 4 GPU windows of 500ms/4s opened on decode cycles (--cupti-duty-start cycles)",
    "auto": "(m1) specprof with its defaults (--mode auto): GPU snapshot windows on cycles, probes within --max-overhead",
    "calib": "calibration",
}
TIMING = {"none": "none", "ebpf": "none", "full": "none", "torchprof": "torch-profiler",
          "v3": "v3", "v4": "v4", "cudaev": "cuda-events", "fullall": "none", "fulllean": "none",
          "fullduty": "none", "fullgraph": "none", "fulldutylong": "none", "fullidle": "none", "ebpflean": "none",
          "fullev": "cuda-events", "idlenoov": "none", "idleoff": "none", "dutynoov": "none",
          "fulldetach": "none", "fulldetachlong": "none", "idledetach": "none",
          "fullcb": "none", "dutycb": "none", "ebpfwin": "none", "probedetach": "none",
          "graphquiet": "none", "graphunsub": "none",
          "probecycles": "none", "auto": "none"}
CUPTI_METHODS = ("full", "fullall", "fulllean", "fullduty", "fullgraph", "fulldutylong", "fullidle", "fullev",
                 "idlenoov", "idleoff", "dutynoov", "fulldetach", "fulldetachlong", "idledetach",
                 "fullcb", "dutycb", "probedetach", "graphquiet", "graphunsub", "probecycles")
# Methods that trace the GPU 1 ms a minute, or not at all: no GPU figures expected.
IDLE_METHODS = ("fullidle", "idlenoov", "idleoff", "idledetach")
DETACH_METHODS = ("fulldetach", "fulldetachlong", "idledetach", "probedetach", "graphquiet", "graphunsub",
                  "probecycles")
PROBE_METHODS = ("ebpfwin", "probedetach", "probecycles")
# Methods that leave the tracing cost to specprof's own defaults (no cost flags).
MODE_METHODS = ("auto",)
SPECPROF_METHODS = ("ebpf", "ebpflean", "ebpfwin") + CUPTI_METHODS + MODE_METHODS
WORKLOADS = ["hf", "eagle-graph", "eagle-eager"]
# The windows of (c4): a cycle has GPU figures only when it lies wholly inside one, so a window
# spans several cycles (HF's are about 110 ms on the H200; 100 ms windows traced 2-4 of 91, §16b).
DUTY = {"hf": "500ms/5s", "eagle": "100ms/1s"}
FAMILY = {"hf": "hf", "eagle-graph": "eagle", "eagle-eager": "eagle"}
PRESET = {"hf": "hf-assisted", "eagle-graph": "sglang-eagle", "eagle-eager": "sglang-eagle"}
DESCRIPTION = {
    "hf": "HF transformers assisted generation (Llama ~1.1 B target / ~0.25 B draft, bf16, eager)",
    "eagle-graph": "SGLang-shaped EAGLE loop, CUDA graphs (~1 B target / ~0.4 B draft, bf16, K=4)",
    "eagle-eager": "SGLang-shaped EAGLE loop, eager (same models)",
}
PHASE_ORDER = ["spec.draft", "spec.verify", "spec.accept", "spec.draft_extend", "spec.kv_rollback",
               "spec.strategy", "spec.cycle_other"]
# Report loss counters that are not lost records.
NOT_LOST = ("gpu_records_of_unhooked_calls", "launches_outside_gpu_windows", "launches_across_gpu_window_close")
# Seconds a run is expected to take before one was seen (budget planning).
EST_BASE = {"hf": 35.0, "eagle-graph": 15.0, "eagle-eager": 15.0}
EST_EXTRA = {"ebpf": 5.0, "full": 10.0, "fullall": 10.0, "fulllean": 10.0, "fullduty": 10.0, "fullgraph": 10.0, "fulldutylong": 10.0, "fullidle": 10.0, "ebpflean": 5.0, "fullev": 10.0, "idlenoov": 10.0, "idleoff": 10.0, "dutynoov": 10.0,
             "fulldetach": 10.0, "fulldetachlong": 10.0, "idledetach": 10.0,
             "fullcb": 10.0, "dutycb": 10.0, "ebpfwin": 5.0, "probedetach": 10.0, "graphquiet": 10.0, "graphunsub": 10.0, "probecycles": 10.0, "auto": 10.0,
             "torchprof": 20.0}
EST_CALIB = {"hf": 45.0, "eagle": 20.0}

FIELDS = ["session", "run_id", "rep", "workload", "method", "status", "rc", "wall_s", "tok_s",
          "accept_len", "tokens", "token_hash", "cycles", "cycle_ms", "loop_s", "setup_s",
          "noise_scale", "agreement", "specprof_cycles", "specprof_loss", "error", "phases_json",
          "info_json"]
PHASE_FIELDS = ["session", "run_id", "rep", "workload", "method", "phase", "metric", "ms", "n"]

# The --dry-run workload: parses the real workloads' flags, sleeps a little, writes a plausible
# result. Failures are injected through environment variables "workload:method,..." (tests).
DRY_WORKLOAD = r'''
import argparse, json, os, random, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--dry-workload", required=True)
ap.add_argument("--timing", default="none")
ap.add_argument("--result", default="")
ap.add_argument("--noise-scale", type=float, default=None)
ap.add_argument("--calibrate-only", action="store_true")
a, _ = ap.parse_known_args()
key = a.dry_workload + ":" + os.environ.get("SPECPROF_SUITE_METHOD", "")
def hit(var):
    return key in os.environ.get(var, "").split(",")
time.sleep(float(os.environ.get("SPECPROF_SUITE_DRY_SLEEP", "0.05")))
if hit("SPECPROF_SUITE_DRY_HANG"):
    if os.environ.get("SPECPROF_SUITE_DRY_PIDFILE"):
        with open(os.environ["SPECPROF_SUITE_DRY_PIDFILE"], "a") as f:
            f.write("%d\n" % os.getpid())
    time.sleep(3600)
if hit("SPECPROF_SUITE_DRY_FAIL"):
    sys.stderr.write("dry workload: injected failure\n")
    sys.exit(2)
if a.calibrate_only:
    res = {"ok": True, "noise_scale": 0.125, "agreement": 0.7, "workload": a.dry_workload}
else:
    cost = {"none": 0.0, "v4": 0.001, "cuda-events": 0.002, "v3": 0.3, "torch-profiler": 0.4}
    names = ["spec.draft", "spec.verify"] + ([] if a.dry_workload == "hf" else ["spec.accept", "spec.draft_extend"])
    gt = {"spec.draft": 0.5, "spec.verify": 1.0, "spec.accept": 0.05, "spec.draft_extend": 0.2}
    tok_s = 1000.0 * (1.0 - cost.get(a.timing, 0.0)) * (1.0 + random.uniform(-0.01, 0.01))
    phases = {}
    prof = None
    if a.timing == "torch-profiler":
        prof = {"phases": {n: {"n": 100, "n_gpu": 100, "gpu_kernel_ms": gt[n] * 0.9,
                               "gpu_span_ms": gt[n] * 1.01, "gpu_busy_ms": gt[n] * 0.95} for n in names},
                "gpu_records": 1000, "unjoined": 0, "outside_ranges": 0}
        phases = {n: {"n": 100} for n in names}
    elif a.timing != "none":
        f = {"v3": 1.3, "v4": 0.4, "cuda-events": 1.0}[a.timing]
        phases = {n: {"n": 100, "mean_ms": gt[n] * f, "total_ms": gt[n] * f * 100} for n in names}
    th = "dry-" + a.dry_workload + ("-DIFF" if hit("SPECPROF_SUITE_DRY_HASHDIFF") else "")
    res = {"ok": True, "workload": a.dry_workload, "timing": a.timing, "tok_s": tok_s,
           "tokens": 256, "token_hash": th, "cycles": 90, "cycle_ms": 256 / tok_s / 90 * 1e3,
           "accept_len": 256 / 90, "loop_s": 256 / tok_s, "setup_s": 0.01, "noise_scale": a.noise_scale,
           "phases": phases, "phase_metric": {"v3": "wall_sync", "v4": "wall", "cuda-events": "gpu_elapsed",
                                              "torch-profiler": "profiler"}.get(a.timing)}
    if prof:
        res["profiler"] = prof
text = json.dumps(res)
if a.result:
    with open(a.result, "w") as f:
        f.write(text + "\n")
print(text)
'''


class Interrupted(Exception):
    pass


def _on_signal(signum, frame):
    raise Interrupted("signal %d" % signum)


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


def log(msg):
    print(msg, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--specprof", default="build/specprof", help="specprof binary (built elsewhere)")
    p.add_argument("--cupti-lib", default="",
                   help="libspecprof_cupti.so for --cupti on (default: next to --specprof when present)")
    p.add_argument("--specprof-args", default="", help="extra flags for 'specprof run' (one string)")
    p.add_argument("--python", default=sys.executable, help="Python with torch (+ transformers)")
    p.add_argument("--pin", type=int, default=-1, metavar="CPU",
                   help="run each workload on this CPU and its SMT siblings, and specprof (and its "
                        "helpers) on the other CPUs, as bench/gpu/pin.sh does: this host's runs "
                        "spread less when nothing shares the workload's core (-1: not pinned)")
    p.add_argument("--budget-s", type=float, default=500.0,
                   help="wall-clock budget: no run is started that is not expected to end within it")
    p.add_argument("--reps", type=int, default=4, help="repetitions (each: every method once per workload)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--run-timeout-s", type=float, default=150.0, help="kill a run after this long")
    p.add_argument("--out", default="", help="results directory (default bench/gpu/results/<UTC date>)")
    p.add_argument("--hf-prompts", type=int, default=4)
    p.add_argument("--hf-new-tokens", type=int, default=64)
    p.add_argument("--hf-args", default="", help="extra flags for hf_assisted.py (one string)")
    p.add_argument("--eagle-cycles", type=int, default=400)
    p.add_argument("--eagle-args", default="", help="extra flags for spec_loop.py --worker sglang")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the calibration runs (each run then calibrates itself)")
    p.add_argument("--dry-run", action="store_true",
                   help="trivial Python commands instead of the workloads (checks the driver; no GPU)")
    p.add_argument("--export", default="", metavar="DIR",
                   help="also copy raw.csv, phases.csv, table.md, versions.txt to DIR after every run, "
                        "and at the end runs-<session>.tar.gz (the runs' small files, < 15 MiB): five "
                        "files, for a device call that returns only a few files from $OUT")
    p.add_argument("--render-only", action="store_true",
                   help="run nothing: rewrite --out/table.md from --out/raw.csv (and the --merge dirs)")
    p.add_argument("--merge", action="append", default=[], metavar="DIR",
                   help="with --render-only: also take the rows of DIR/raw.csv (and phases.csv, "
                        "versions.txt), e.g. the results of a second device call; --out gets the union")
    a = p.parse_args(argv)
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.methods = [m for m in a.methods.split(",") if m]
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error("unknown workload %r (have %s)" % (w, ", ".join(WORKLOADS)))
    for m in a.methods:
        if m not in METHODS + EXTRA_METHODS:
            p.error("unknown method %r (have %s)" % (m, ", ".join(METHODS + EXTRA_METHODS)))
    if a.reps < 1 or a.budget_s <= 0:
        p.error("--reps >= 1 and --budget-s > 0")
    if not a.out:
        a.out = os.path.join(ROOT, "bench", "gpu", "results", now_utc().strftime("%Y-%m-%d"))
    a.out = os.path.abspath(a.out)
    a.specprof = os.path.abspath(os.path.join(ROOT, a.specprof)) if not os.path.isabs(a.specprof) else a.specprof
    if not a.cupti_lib:
        cand = os.path.join(os.path.dirname(a.specprof), "libspecprof_cupti.so")
        a.cupti_lib = cand if os.path.exists(cand) else ""
    elif not os.path.isabs(a.cupti_lib):
        a.cupti_lib = os.path.abspath(os.path.join(ROOT, a.cupti_lib))
    a.pin_workload, a.pin_rest = pin_sets(a.pin) if a.pin >= 0 else ("", "")
    return a


def pin_sets(cpu):
    """The CPU list for the workload (cpu and its SMT siblings) and for everything else."""
    try:
        with open("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list" % cpu) as f:
            spec = f.read().strip()
    except OSError:
        spec = str(cpu)
    wl = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        wl.update(range(int(lo), int(hi or lo) + 1))
    rest = sorted(os.sched_getaffinity(0) - wl)
    if cpu not in os.sched_getaffinity(0) or not rest:
        raise SystemExit("--pin %d: CPU %d is not usable here, or no CPU is left for specprof" % (cpu, cpu))
    return ",".join(str(c) for c in sorted(wl)), ",".join(str(c) for c in rest)


# ---------------------------------------------------------------- commands


def workload_cmd(a, w, timing, result, noise, calibrate=False):
    if a.dry_run:
        cmd = [a.python, "-c", DRY_WORKLOAD, "--dry-workload", w]
    elif FAMILY[w] == "hf":
        cmd = [a.python, os.path.join(ROOT, "bench/gpu/hf_assisted.py"),
               "--prompts", str(a.hf_prompts), "--new-tokens", str(a.hf_new_tokens)]
        cmd += shlex.split(a.hf_args)
    else:
        cmd = [a.python, os.path.join(ROOT, "bench/gpu/spec_loop.py"), "--worker", "sglang",
               "--graphs", "off" if w == "eagle-eager" else "on", "--cycles", str(a.eagle_cycles)]
        cmd += shlex.split(a.eagle_args)
    if calibrate:
        cmd += ["--calibrate-only"]
    else:
        cmd += ["--timing", timing]
        if noise is not None:
            cmd += ["--noise-scale", repr(noise)]
    cmd += ["--result", result]
    if a.pin_workload:
        cmd = ["taskset", "-c", a.pin_workload] + cmd
    return cmd


def specprof_cmd(a, method, w, outdir, inner):
    cmd = [a.specprof, "run", "-q", "--interval", "0", "--preset", PRESET[w], "-o", outdir, "--cycles-jsonl"]
    if method in MODE_METHODS:
        cmd += ["--mode", method]
    else:
        cmd += ["--cupti", "on" if method in CUPTI_METHODS else "off"]
    if method in ("fulllean", "ebpflean"):
        cmd += ["--cpu-hz", "0", "--pprof=false", "--perfetto=false"]
    if method in IDLE_METHODS:
        cmd += ["--cupti-duty", "1ms/60s"]
    if method in ("fullduty", "dutynoov", "fulldetach", "dutycb", "graphquiet", "graphunsub"):
        cmd += ["--cupti-duty", DUTY[FAMILY[w]]]
    if method == "fullgraph":
        cmd += ["--cupti-graphs", "graph"]
    if method in ("fulldutylong", "fulldetachlong"):
        cmd += ["--cupti-duty", "500ms/5s"]
    if method == "probedetach":
        cmd += ["--cupti-duty", "500ms/2s"]
    if method == "probecycles":
        cmd += ["--cupti-duty", "500ms/4s"]
    if method in DETACH_METHODS:
        cmd += ["--cupti-windows", {"fulldetach": "6", "fulldetachlong": "2", "idledetach": "1", "probedetach": "2",
                                    "graphquiet": "3", "graphunsub": "3",
                                    "probecycles": "4"}[method],
                "--cupti-detach"]
    if method == "probecycles":
        cmd += ["--cupti-duty-start", "cycles"]
    if method in PROBE_METHODS:
        cmd += ["--probe-duty", PROBE_DUTY]
    if (method in CUPTI_METHODS or method in MODE_METHODS) and a.cupti_lib:
        cmd += ["--cupti-lib", a.cupti_lib]
    cmd += shlex.split(a.specprof_args)
    if a.pin_rest:
        cmd = ["taskset", "-c", a.pin_rest] + cmd
    return cmd + ["--"] + inner


def descendants(pid):
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for d in names:
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, stack = [], [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def _signal_all(p, pids, sig):
    try:
        os.killpg(p.pid, sig)
    except OSError:
        pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def kill_tree(p, grace=10.0):
    """SIGINT (specprof writes its report), then SIGKILL: the run's process group and every
    descendant of the process this suite started."""
    pids = descendants(p.pid)
    _signal_all(p, pids, signal.SIGINT)
    try:
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    pids = set(pids) | set(descendants(p.pid))
    _signal_all(p, pids, signal.SIGKILL)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def execute(cmd, run_dir, timeout, env):
    """Runs cmd (cwd: repository root); stdout/stderr to run_dir. Returns (rc, timed_out, secs)."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "cmd.txt"), "w") as f:
        f.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
    t0 = time.monotonic()
    with open(os.path.join(run_dir, "stdout.txt"), "wb") as fo, \
            open(os.path.join(run_dir, "stderr.txt"), "wb") as fe:
        try:
            p = subprocess.Popen(cmd, cwd=ROOT, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=env)
        except OSError as e:
            fe.write(("cannot start: %s\n" % e).encode())
            return None, False, time.monotonic() - t0
        try:
            rc = p.wait(timeout=max(1.0, timeout))
            return rc, False, time.monotonic() - t0
        except subprocess.TimeoutExpired:
            kill_tree(p)
            return p.returncode, True, time.monotonic() - t0
        except BaseException:
            kill_tree(p, grace=5.0)
            raise


def tail(path, n=3, width=300):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-width:]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- specprof's report


def parse_report(path):
    """Per-phase figures of the busiest thread of specprof's report.json (agent/model.go): ms per
    cycle in which the phase ran (cpu span, sync wait) or whose GPU work is known (gpu span,
    busy, kernel sum)."""
    rep = read_json(path)
    if rep is None:
        return None
    best = None
    for proc in rep.get("processes") or []:
        for t in proc.get("threads") or []:
            c = t.get("cycles") or 0
            if best is None or c > best[0]:
                best = (c, t, proc)
    loss = rep.get("loss") or {}
    # Records of calls specprof does not hook (cudaMemcpy HtoD ...) are not lost, nor are launches made
    # outside the duty-cycled tracing windows (no records are made there): leave them out.
    out = {"loss_total": sum(v for k, v in loss.items() if isinstance(v, (int, float))
                             and k not in NOT_LOST),
           "loss": {k: v for k, v in loss.items() if v}, "phases": {}, "cycles": 0,
           "problems": [], "spec_metrics": rep.get("spec_metrics"), "events": rep.get("events")}
    if best is None:
        out["problems"].append("no thread in the report")
        return out
    cycles, t, proc = best
    out["cycles"] = cycles
    out["gpu"] = bool(t.get("gpu"))
    out["cycle_ms"] = (t.get("cycle_ns") or 0) / cycles / 1e6 if cycles else None
    out["problems"] = list(proc.get("problems") or [])
    out["pid"] = proc.get("pid")
    g = proc.get("gpu") or {}
    if g.get("lib_cupti_detaches"):   # --cupti-detach: what the detaches cost the application
        out["detach"] = {"detaches": g["lib_cupti_detaches"], "stall_ms": g.get("lib_detach_stall_ns", 0) / 1e6}
    elif g.get("lib_cupti_detach_refused"):  # the process had built CUDA graphs: not finalized
        out["detach"] = {"detaches": 0, "refused": 1, "quiet": g.get("lib_cupti_detach_quiet", 0)}
    for ph in t.get("phases") or []:
        name = ph.get("phase")
        c = ph.get("cycles") or 0
        gc = ph.get("gpu_cycles") or 0
        d = {"n": c}
        if c:
            d["cpu_span"] = (ph.get("cpu_span_ns") or 0) / c / 1e6
            d["sync_wait"] = (ph.get("sync_wait_ns") or 0) / c / 1e6
            d["launches"] = (ph.get("launches") or 0) / c
            if ph.get("cpu_samples"):   # the CPU sampler (--cpu-hz), when it ran
                d["cpu_sampled"] = (ph.get("cpu_ns") or 0) / c / 1e6
        if gc:
            d["gpu_span"] = (ph.get("gpu_span_ns") or 0) / gc / 1e6
            d["gpu_busy"] = (ph.get("gpu_busy_ns") or 0) / gc / 1e6
            d["gpu_kernel"] = (ph.get("gpu_kernel_ns") or 0) / gc / 1e6
            d["gpu_active"] = (ph.get("gpu_active_ns") or 0) / gc / 1e6
            d["gpu_elapsed_sp"] = (ph.get("gpu_elapsed_ns") or 0) / gc / 1e6
            d["gpu_host_gap"] = (ph.get("gpu_host_gap_ns") or 0) / gc / 1e6
            d["gpu_n"] = gc
        out["phases"][name] = d
    return out


def loop_cycles(report, path, window):
    """Replaces the report's per-phase figures by those of the cycles inside the measured loop
    (cycles.jsonl, CLOCK_MONOTONIC like the workload's window): warm-up cycles (graph capture,
    first calls) would otherwise weigh on the means. Keeps the report's figures when the file is
    missing or holds no such cycle."""
    if not os.path.exists(path):
        return
    t0, t1 = window
    tid = None
    acc = {}
    n = 0
    with open(path) as f:
        for line in f:
            try:
                c = json.loads(line)
            except ValueError:
                continue
            if c.get("start", 0) < t0 or c.get("end", 0) > t1:
                continue
            if tid is None:
                tid = c.get("tid")
            if c.get("tid") != tid:
                continue
            n += 1
            for ph in c.get("phases") or []:
                st = ph.get("stats") or {}
                d = acc.setdefault(ph.get("phase"), {"n": 0, "gpu_n": 0, "cpu_span": 0.0, "sync_wait": 0.0,
                                                     "gpu_span": 0.0, "gpu_busy": 0.0, "gpu_kernel": 0.0,
                                                     "gpu_active": 0.0, "gpu_elapsed_sp": 0.0, "gpu_host_gap": 0.0,
                                                     "cpu_sampled": 0.0, "samples": 0, "launches": 0.0})
                d["n"] += 1
                d["cpu_span"] += (st.get("cpu_span_ns") or 0) / 1e6
                d["sync_wait"] += (st.get("sync_wait_ns") or 0) / 1e6
                d["launches"] += st.get("launches") or 0
                if st.get("cpu_samples"):
                    d["samples"] += 1
                    d["cpu_sampled"] += (st.get("cpu_ns") or 0) / 1e6
                if st.get("gpu_cycles"):
                    d["gpu_n"] += 1
                    d["gpu_span"] += (st.get("gpu_span_ns") or 0) / 1e6
                    d["gpu_busy"] += (st.get("gpu_busy_ns") or 0) / 1e6
                    d["gpu_kernel"] += (st.get("gpu_kernel_ns") or 0) / 1e6
                    d["gpu_active"] += (st.get("gpu_active_ns") or 0) / 1e6
                    d["gpu_elapsed_sp"] += (st.get("gpu_elapsed_ns") or 0) / 1e6
                    d["gpu_host_gap"] += (st.get("gpu_host_gap_ns") or 0) / 1e6
    if not n:
        return
    phases = {}
    for name, d in acc.items():
        o = {"n": d["n"], "cpu_span": d["cpu_span"] / d["n"], "sync_wait": d["sync_wait"] / d["n"],
             "launches": d["launches"] / d["n"]}
        if d["samples"]:
            o["cpu_sampled"] = d["cpu_sampled"] / d["n"]
        if d["gpu_n"]:
            for k in ("gpu_span", "gpu_busy", "gpu_kernel", "gpu_active", "gpu_elapsed_sp", "gpu_host_gap"):
                o[k] = d[k] / d["gpu_n"]
            o["gpu_n"] = d["gpu_n"]
        phases[name] = o
    report["phases"] = phases
    report["loop_cycles"] = n


def phase_metrics(method, res, report):
    """{phase: {metric: ms}} that this method reports."""
    out = {}
    if method in SPECPROF_METHODS and report:
        keys = ("cpu_span", "sync_wait", "cpu_sampled") if method in ("ebpf", "ebpflean", "ebpfwin") else \
            ("gpu_span", "gpu_busy", "gpu_kernel", "gpu_active", "gpu_elapsed_sp", "gpu_host_gap", "cpu_span", "cpu_sampled")
        for name, d in (report.get("phases") or {}).items():
            m = {k: d[k] for k in keys if k in d}
            if m:
                m["n"] = d.get("gpu_n", d.get("n"))
                out[name] = m
        if method == "fullev" and res:
            # The same run's CUDA events: the reference for specprof's gpu elapsed.
            for name, d in (res.get("phases") or {}).items():
                if d.get("mean_ms") is not None:
                    out.setdefault(name, {})["gpu_elapsed_ev"] = d["mean_ms"]
        return out
    if not res:
        return out
    if method == "torchprof":
        for name, d in ((res.get("profiler") or {}).get("phases") or {}).items():
            if d.get("n_gpu"):
                out[name] = {"gpu_span": d.get("gpu_span_ms"), "gpu_busy": d.get("gpu_busy_ms"),
                             "gpu_kernel": d.get("gpu_kernel_ms"), "n": d.get("n_gpu")}
        return out
    metric = {"v3": "wall_sync", "v4": "wall", "cudaev": "gpu_elapsed"}.get(method)
    if metric:
        for name, d in (res.get("phases") or {}).items():
            if d.get("mean_ms") is not None:
                out[name] = {metric: d["mean_ms"], "n": d.get("n")}
    return out


# ---------------------------------------------------------------- the suite


class Suite:
    def __init__(self, a):
        self.a = a
        self.t0 = time.monotonic()
        # Unique across calls started in the same second (merged result dirs dedupe by run id).
        self.session = now_utc().strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(2).hex()
        self.rows = []
        self.observed = {}
        self.noise = {}
        self.meta = {"started": now_utc().strftime("%Y-%m-%d %H:%M:%S UTC"),
                     "command": " ".join(shlex.quote(x) for x in sys.argv),
                     "budget_s": a.budget_s, "dry_run": a.dry_run, "versions": "", "notes": []}
        os.makedirs(os.path.join(a.out, "runs"), exist_ok=True)
        self.raw_path = os.path.join(a.out, "raw.csv")
        self.phases_path = os.path.join(a.out, "phases.csv")
        self.table_path = os.path.join(a.out, "table.md")
        self.rows = load_rows(self.raw_path)
        if self.rows:
            log("[suite] appending to %s (%d earlier rows)" % (self.raw_path, len(self.rows)))
        self.is_root = hasattr(os, "geteuid") and os.geteuid() == 0

    def elapsed(self):
        return time.monotonic() - self.t0

    def left(self):
        return self.a.budget_s - self.elapsed()

    def estimate(self, w, m):
        seen = self.observed.get((w, m))
        if seen:
            return max(seen)
        if self.a.dry_run:
            return 1.0
        base = self.observed.get((w, "none"))
        return (max(base) if base else EST_BASE[w]) + EST_EXTRA.get(m, 0.0)

    def env(self, method):
        env = dict(os.environ)
        env["SPECPROF_SUITE_METHOD"] = method
        if method == "fullall":
            env["SPECPROF_CUPTI_API"] = "all"
        if method in ("idlenoov", "dutynoov"):
            env["SPECPROF_CUPTI_KINDS"] = "kernel,memcpy,memset,api,sync"
        if method == "idleoff":
            env["SPECPROF_CUPTI_DISABLE"] = "1"
        if method in ("fullcb", "dutycb"):
            env["SPECPROF_CUPTI_API_SOURCE"] = "callbacks"
        if method == "graphunsub":
            env["SPECPROF_CUPTI_GRAPH_DETACH"] = "unsubscribe"
        elif method == "graphquiet":
            env["SPECPROF_CUPTI_GRAPH_DETACH"] = "quiet"
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        return env

    # -- one run
    def run(self, rep, w, m, idx, total):
        a = self.a
        run_id = "%s-%s-%s-r%d" % (self.session, w, m, rep)
        run_dir = os.path.join(a.out, "runs", run_id)
        row = {"session": self.session, "run_id": run_id, "rep": rep, "workload": w, "method": m}
        est = self.estimate(w, m)
        prefix = "[suite %4.0fs/%.0fs] (%d/%d) rep %d %-11s %-9s" % (
            self.elapsed(), a.budget_s, idx, total, rep, w, m)
        if self.elapsed() + est > a.budget_s:
            row.update(status="skipped", error="budget: %.0f s left, run expected to take %.0f s" % (self.left(), est))
            log("%s skipped (budget: %.0f s left, needs ~%.0f s)" % (prefix, self.left(), est))
            self.record(row, {})
            return
        if m in SPECPROF_METHODS:
            why = None
            if not os.path.exists(a.specprof):
                why = "specprof binary not found: %s" % a.specprof
            elif not a.dry_run and not self.is_root:
                why = "specprof needs root (run the suite as root)"
            elif m in CUPTI_METHODS and not a.cupti_lib:
                why = "libspecprof_cupti.so not found next to %s (--cupti-lib)" % a.specprof
            if why:
                row.update(status="fail", error=why)
                log("%s FAIL %s" % (prefix, why))
                self.record(row, {})
                return
        result = os.path.join(run_dir, "result.json")
        os.makedirs(run_dir, exist_ok=True)
        inner = workload_cmd(a, w, TIMING[m], result, self.noise.get(FAMILY[w]))
        spdir = os.path.join(run_dir, "specprof")
        cmd = specprof_cmd(a, m, w, spdir, inner) if m in SPECPROF_METHODS else inner
        timeout = min(a.run_timeout_s, max(30.0, self.left() + 60.0))
        log("%s ..." % prefix)
        rc, timed_out, secs = execute(cmd, run_dir, timeout, self.env(m))
        self.observed.setdefault((w, m), []).append(secs)
        res = read_json(result)
        report = parse_report(os.path.join(spdir, "report.json")) if m in SPECPROF_METHODS else None
        if report is not None and res and res.get("loop_mono_ns"):
            loop_cycles(report, os.path.join(spdir, "cycles.jsonl"), res["loop_mono_ns"])
        row.update(rc="" if rc is None else rc, wall_s="%.2f" % secs)
        errs = []
        if timed_out:
            errs.append("timeout after %.0f s" % secs)
        if res and res.get("ok"):
            for k in ("tok_s", "accept_len", "tokens", "token_hash", "cycles", "cycle_ms", "loop_s",
                      "setup_s", "noise_scale", "agreement"):
                if res.get(k) is not None:
                    row[k] = res[k]
        else:
            errs.append((res or {}).get("error") or "workload: no result (rc %s): %s"
                        % (rc, tail(os.path.join(run_dir, "stderr.txt"))))
        if m in SPECPROF_METHODS:
            if report is None:
                errs.append("specprof: no report.json (rc %s): %s" % (rc, tail(os.path.join(run_dir, "stderr.txt"))))
            else:
                row["specprof_cycles"] = report.get("cycles")
                row["specprof_loss"] = report.get("loss_total")
                if not report.get("cycles"):
                    errs.append("specprof: no cycles in the report (%s)" % "; ".join(report.get("problems") or []))
                if (m in CUPTI_METHODS or m in MODE_METHODS) and m not in IDLE_METHODS and report.get("cycles") \
                        and not report.get("gpu"):
                    errs.append("specprof: no GPU figures in the report (CUPTI records not joined)")
        if rc not in (0, None) and not timed_out and not errs:
            errs.append("exit code %s: %s" % (rc, tail(os.path.join(run_dir, "stderr.txt"))))
        ok = res is not None and res.get("ok") and not timed_out
        if timed_out:
            status = "timeout"
        elif ok and not errs:
            status = "ok"
        elif ok:
            status = "partial"   # the workload measured, the profiler's own output is missing
        else:
            status = "fail"
        row["status"] = status
        row["error"] = "; ".join(e for e in errs if e)[:600]
        info = {}
        if res:
            for k in ("notes", "versions", "attn_implementation", "draft_params", "target_params",
                      "draft_forwards_per_cycle", "accept_len_per_prompt", "distinct_tokens",
                      "profiler_post_s", "phase_metric", "timing"):
                if res.get(k) is not None:
                    info[k] = res[k]
            if res.get("profiler"):
                info["profiler"] = {k: v for k, v in res["profiler"].items() if k != "phases"}
        if report:
            info["specprof"] = {k: report.get(k) for k in ("cycles", "cycle_ms", "gpu", "loss", "problems", "detach",
                                                             "spec_metrics", "events")}
            # launches per cycle per phase: with launchcost.py's added cost per launch, a method's
            # cost on this workload without the workload's own run-to-run noise
            info["specprof"]["launches_per_cycle"] = {name: round(d["launches"], 1) for name, d in
                                                      (report.get("phases") or {}).items() if "launches" in d}
        phases = phase_metrics(m, res if ok else None, report)
        row["phases_json"] = json.dumps(phases, sort_keys=True)
        row["info_json"] = json.dumps(info, sort_keys=True)
        if status in ("ok", "partial"):
            log("%s %s %.1f tok/s, accept %.2f, %s tokens, %.1f s%s" % (
                prefix, status, float(row.get("tok_s") or 0), float(row.get("accept_len") or 0),
                row.get("tokens", "?"), secs, ("  [%s]" % row["error"]) if row["error"] else ""))
        else:
            log("%s %s (%.1f s): %s" % (prefix, status.upper(), secs, row["error"]))
        self.record(row, phases)

    def calibrate(self, fam):
        a = self.a
        w = "hf" if fam == "hf" else next(x for x in a.workloads if FAMILY[x] == fam)
        run_id = "%s-calib-%s" % (self.session, fam)
        run_dir = os.path.join(a.out, "runs", run_id)
        row = {"session": self.session, "run_id": run_id, "rep": 0, "workload": fam, "method": "calib"}
        est = 1.0 if a.dry_run else EST_CALIB[fam]
        if self.elapsed() + est > a.budget_s:
            row.update(status="skipped", error="budget")
            self.record(row, {})
            return
        result = os.path.join(run_dir, "result.json")
        os.makedirs(run_dir, exist_ok=True)
        cmd = workload_cmd(a, w, "none", result, None, calibrate=True)
        log("[suite %4.0fs/%.0fs] calibrating %s ..." % (self.elapsed(), a.budget_s, fam))
        rc, timed_out, secs = execute(cmd, run_dir, min(a.run_timeout_s, max(30.0, self.left() + 60.0)),
                                      self.env("calib"))
        res = read_json(result)
        row.update(rc="" if rc is None else rc, wall_s="%.2f" % secs)
        if res and res.get("ok") and res.get("noise_scale") is not None and not timed_out:
            self.noise[fam] = float(res["noise_scale"])
            row.update(status="ok", noise_scale=res["noise_scale"], agreement=res.get("agreement"),
                       setup_s=res.get("setup_s"))
            info = {k: res[k] for k in ("notes", "versions", "draft_params", "target_params",
                                        "attn_implementation") if res.get(k) is not None}
            row["info_json"] = json.dumps(info, sort_keys=True)
            log("[suite %4.0fs/%.0fs] %s: noise scale %.6g (agreement %s), %.1f s"
                % (self.elapsed(), a.budget_s, fam, self.noise[fam], res.get("agreement"), secs))
        else:
            err = "timeout" if timed_out else ((res or {}).get("error") or tail(os.path.join(run_dir, "stderr.txt")))
            row.update(status="timeout" if timed_out else "fail", error=("calibration: %s" % err)[:600])
            self.meta["notes"].append("calibration of %s failed: every %s run calibrates itself" % (fam, fam))
            log("[suite] calibration of %s FAILED: %s" % (fam, err))
        self.record(row, {})

    def record(self, row, phases):
        row.setdefault("session", self.session)
        flat = {k: _cell(row.get(k)) for k in FIELDS}   # as read back from the CSV
        self.rows.append(flat)
        new = not os.path.exists(self.raw_path)
        with open(self.raw_path, "a", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=FIELDS)
            if new:
                wr.writeheader()
            wr.writerow(flat)
            f.flush()
            os.fsync(f.fileno())
        if phases:
            new = not os.path.exists(self.phases_path)
            with open(self.phases_path, "a", newline="") as f:
                wr = csv.DictWriter(f, fieldnames=PHASE_FIELDS)
                if new:
                    wr.writeheader()
                for ph, d in sorted(phases.items()):
                    for metric, v in sorted(d.items()):
                        if metric == "n" or v is None:
                            continue
                        wr.writerow({"session": row["session"], "run_id": row["run_id"], "rep": row.get("rep"),
                                     "workload": row["workload"], "method": row["method"], "phase": ph,
                                     "metric": metric, "ms": "%.6f" % v, "n": d.get("n", "")})
        self.write_table()

    def export(self, final=False):
        """Copies the result files to --export (and the runs' archive when final)."""
        dst = self.a.export
        if not dst:
            return
        try:
            os.makedirs(dst, exist_ok=True)
            for name in ("raw.csv", "phases.csv", "table.md", "versions.txt"):
                src = os.path.join(self.a.out, name)
                if os.path.exists(src):
                    tmp = os.path.join(dst, "." + name + ".tmp")
                    with open(src, "rb") as fi, open(tmp, "wb") as fo:
                        fo.write(fi.read())
                    os.replace(tmp, os.path.join(dst, name))
            if final:
                self.export_runs(dst)
        except Exception as e:   # never stop the measurements for it
            log("[suite] export to %s failed: %s" % (dst, e))

    def export_runs(self, dst, keep=256 << 10):
        """runs-<session>.tar.gz: per run cmd.txt, result.json, specprof/report.json and the last
        `keep` bytes of stdout.txt / stderr.txt (bounded: a few MiB at most)."""
        import io
        import tarfile
        path = os.path.join(dst, "runs-%s.tar.gz" % self.session)
        runs = os.path.join(self.a.out, "runs")
        wanted = ("cmd.txt", "result.json", "stdout.txt", "stderr.txt", os.path.join("specprof", "report.json"))
        with tarfile.open(path + ".tmp", "w:gz") as tar:
            for d in sorted(os.listdir(runs)):
                if not d.startswith(self.session):
                    continue
                for rel in wanted:
                    fp = os.path.join(runs, d, rel)
                    if not os.path.isfile(fp):
                        continue
                    with open(fp, "rb") as f:
                        f.seek(0, os.SEEK_END)
                        size = f.tell()
                        f.seek(max(0, size - keep) if rel.endswith(".txt") and rel != "cmd.txt" else 0)
                        data = f.read()
                    info = tarfile.TarInfo(os.path.join("runs", d, rel))
                    info.size = len(data)
                    info.mtime = int(os.path.getmtime(fp))
                    tar.addfile(info, io.BytesIO(data))
        os.replace(path + ".tmp", path)
        log("[suite] exported %s (%d bytes)" % (path, os.path.getsize(path)))

    def write_table(self):
        try:
            text = render(self.rows, self.meta, self.a)
        except Exception as e:   # never lose the measurements to a table bug
            import traceback
            traceback.print_exc()
            text = "# specprof GPU benchmark suite\n\nrendering the table failed: %s; see raw.csv\n" % e
        tmp = self.table_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.table_path)
        self.export()

    def versions(self):
        a = self.a
        out = []

        def sh(cmd, timeout=30):
            try:
                r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
                return (r.stdout + r.stderr).strip()
            except Exception as e:
                return "(%s: %s)" % (cmd[0], e)

        out.append("date: %s" % self.meta["started"])
        out.append("git: %s" % sh(["git", "rev-parse", "--short", "HEAD"]))
        out.append("kernel: %s" % os.uname().release)
        out.append("specprof: %s%s" % (a.specprof, "" if os.path.exists(a.specprof) else " (missing)"))
        out.append("cupti lib: %s" % (a.cupti_lib or "(none)"))
        if not a.dry_run:
            out.append("gpu: %s" % sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                       "--format=csv,noheader"]))
            out.append("python: %s" % sh([a.python, "-c",
                                          "import sys, torch\n"
                                          "try:\n import transformers; tv = transformers.__version__\n"
                                          "except Exception as e:\n tv = 'missing (%s)' % e\n"
                                          "print('python', sys.version.split()[0], '| torch', torch.__version__,"
                                          " '| cuda', torch.version.cuda, '| transformers', tv)"], timeout=90))
        else:
            out.append("python: %s (dry run)" % sys.version.split()[0])
        if a.pin_workload:
            out.append("pinned: workloads on CPUs %s, specprof on %s (--pin)" % (a.pin_workload, a.pin_rest))
        text = "\n".join(out)
        self.meta["versions"] = text
        with open(os.path.join(a.out, "versions.txt"), "a") as f:
            f.write("--- session %s\n%s\n" % (self.session, text))
        log("[suite] " + text.replace("\n", "\n[suite] "))

    def main(self):
        a = self.a
        log("[suite] results in %s; budget %.0f s; workloads %s; methods %s; %d repetitions%s"
            % (a.out, a.budget_s, ",".join(a.workloads), ",".join(a.methods), a.reps,
               " (DRY RUN)" if a.dry_run else ""))
        if not a.dry_run and not self.is_root:
            self.meta["notes"].append("not run as root: the specprof methods fail")
            log("[suite] WARNING: not root; specprof runs will be recorded as failed")
        if not a.dry_run and self.is_root:
            subprocess.run("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing",
                           shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.versions()
        self.write_table()
        plan = []
        for rep in range(1, a.reps + 1):
            for wi, w in enumerate(a.workloads):
                k = (rep - 1 + wi) % len(a.methods)
                for m in a.methods[k:] + a.methods[:k]:
                    plan.append((rep, w, m))
        try:
            if not a.no_calibrate:
                for fam in sorted({FAMILY[w] for w in a.workloads}, key=lambda f: f != "hf"):
                    self.calibrate(fam)
            for i, (rep, w, m) in enumerate(plan, 1):
                self.run(rep, w, m, i, len(plan))
        except (Interrupted, KeyboardInterrupt) as e:
            self.meta["notes"].append("interrupted (%s) after %.0f s" % (e, self.elapsed()))
            log("[suite] interrupted: %s" % e)
        self.meta["finished"] = now_utc().strftime("%Y-%m-%d %H:%M:%S UTC")
        self.meta["elapsed_s"] = self.elapsed()
        self.write_table()
        self.export(final=True)
        mine = [r for r in self.rows if r["session"] == self.session and r["method"] != "calib"]
        ok = sum(1 for r in mine if r["status"] in ("ok", "partial"))
        log("[suite] done in %.0f s: %d runs ok/partial, %d failed, %d skipped; %s"
            % (self.elapsed(), ok, sum(1 for r in mine if r["status"] in ("fail", "timeout")),
               sum(1 for r in mine if r["status"] == "skipped"), self.table_path))
        return 0 if ok else 1


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def load_rows(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({k: r.get(k, "") or "" for k in FIELDS})
    return rows


# ---------------------------------------------------------------- the tables


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def fmt(x, nd=3):
    if x is None:
        return "—"
    if abs(x) >= 100:
        return "%.1f" % x
    if abs(x) >= 10:
        return "%.2f" % x
    return "%.*f" % (nd, x)


def pct(x):
    return "—" if x is None else "%+.1f %%" % (x * 100)


def median(v):
    return statistics.median(v) if v else None


def render(rows, meta, a):
    L = []
    L.append("# specprof GPU benchmark suite")
    L.append("")
    if meta.get("rendered"):
        when = ""
    elif meta.get("finished"):
        when = ", finished %s (%.0f s)" % (meta["finished"], meta.get("elapsed_s", 0))
    else:
        when = " — still running or interrupted: partial results"
    L.append("Generated by `bench/gpu/suite.py` (issue 6). Started %s%s." % (meta.get("started"), when))
    if meta.get("dry_run"):
        L.append("")
        L.append("**DRY RUN: the workloads were trivial Python commands; the numbers mean nothing.**")
    L.append("")
    L.append("Command: `%s`" % meta.get("command"))
    L.append("")
    if meta.get("versions"):
        L.append("```")
        L.append(meta["versions"])
        L.append("```")
        L.append("")
    for n in meta.get("notes") or []:
        L.append("- note: %s" % n)
    if meta.get("notes"):
        L.append("")
    runs = [r for r in rows if r["method"] != "calib"]
    calib = [r for r in rows if r["method"] == "calib"]
    if calib:
        L.append("Calibration (strength of the target's extra layers; all runs of a family use it):")
        L.append("")
        L.append("| session | family | status | noise scale | draft/target agreement | s |")
        L.append("|---|---|---|---|---|---|")
        for r in calib:
            L.append("| %s | %s | %s | %s | %s | %s |" % (r["session"], r["workload"], r["status"],
                                                         r["noise_scale"] or "—", fmt(fnum(r["agreement"])),
                                                         r["wall_s"] or "—"))
        L.append("")
    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in runs)]
    for w in workloads:
        wr = [r for r in runs if r["workload"] == w]
        L.append("## %s — %s" % (w, DESCRIPTION.get(w, "")))
        L.append("")
        L.extend(throughput_table(wr))
        L.append("")
        L.extend(phase_table(wr))
        L.append("")
    bad = [r for r in runs if r["status"] not in ("ok",)]
    if bad:
        L.append("## Runs that failed, were partial, timed out or were skipped")
        L.append("")
        L.append("| run | status | rc | s | error |")
        L.append("|---|---|---|---|---|")
        for r in bad:
            L.append("| %s | %s | %s | %s | %s |" % (r["run_id"], r["status"], r["rc"], r["wall_s"] or "—",
                                                     (r["error"] or "").replace("|", "/").replace("\n", " ")))
        L.append("")
    L.append("## How to read this")
    L.append("")
    L.append("- One process per run; every repetition runs each method once per workload, the order "
             "rotated by one each repetition. tok/s: generated tokens / wall time of the measured loop "
             "(after warm-up, ending with a device synchronise), median [min–max] over the runs that "
             "measured. Δ: median over repetitions of (method / (a) none of the same repetition) − 1 "
             "(unpaired medians when no pair exists).")
    L.append("- accept len: generated tokens per target forward (verify). tokens: the generated token ids' "
             "hash equals the hash of (a)'s runs (`same`) or not (`DIFF`): a profiler must not change them.")
    L.append("- Per-phase times are ms per occurrence of the phase (per cycle), medians over runs, and in "
             "parentheses the difference to the ground truth (g): CUDA events recorded on the stream at "
             "the phase's start and end, in a separate run, so (g) is the GPU time from the phase's first "
             "to last work including gaps. specprof (c): `gpu active` is the union of the phase's kernels, "
             "copies and sets, each counted from its stream predecessor's end when it was launched before "
             "that end (the GPU's hand-over gap, which events count), without the time the stream waited "
             "for the CPU: on a GPU-bound phase the figure to compare with (g), and one that specprof's own "
             "CPU cost does not stretch. `gpu elapsed` is the phase's stream time from its first to last "
             "work, every gap included: what events measure in the same run; (c8) compares it with the "
             "CUDA events recorded in its own runs. `gpu span` (first kernel start to last kernel end of the "
             "phase's launches) is the figure torch.profiler (d) gives too; `gpu busy` is the union of "
             "kernel intervals, `kernel sum` their sum; `cpu span` (b, c) the CPU time from the phase's "
             "first to last driver call, `cpu sampled` (b, c; when specprof's CPU sampler ran) the "
             "sampled CPU time; (e) `wall+sync` and (f) `wall` are the timers' own readings.")
    L.append("- specprof's per-phase figures are those of the cycles inside the measured loop (its cycles.jsonl "
             "against the loop's CLOCK_MONOTONIC window); where that file is missing, every cycle of the process, "
             "warm-up included "
             "(10 cycles / one 16-token generate before the measured loop).")
    L.append("")
    return "\n".join(L) + "\n"


def _status_ok(r):
    return r["status"] in ("ok", "partial") and fnum(r["tok_s"]) is not None


def throughput_table(wr):
    L = ["| method | runs ok / all | tok/s median [min–max] | Δ tok/s vs (a) | accept len | tokens | "
         "token ids | cycle ms | specprof lost events |",
         "|---|---|---|---|---|---|---|---|---|"]
    ref_hashes = [r["token_hash"] for r in wr if r["method"] == "none" and _status_ok(r) and r["token_hash"]]
    if not ref_hashes:
        ref_hashes = [r["token_hash"] for r in wr if _status_ok(r) and r["token_hash"]]
    ref = max(set(ref_hashes), key=ref_hashes.count) if ref_hashes else None
    base = {}
    for r in wr:
        if r["method"] == "none" and _status_ok(r):
            base.setdefault((r["session"], r["rep"]), []).append(fnum(r["tok_s"]))
    base_med = median([fnum(r["tok_s"]) for r in wr if r["method"] == "none" and _status_ok(r)])
    for m in METHODS + EXTRA_METHODS:
        mr = [r for r in wr if r["method"] == m]
        if not mr:
            continue
        okr = [r for r in mr if _status_ok(r)]
        tps = [fnum(r["tok_s"]) for r in okr]
        med = median(tps)
        delta = None
        if m != "none":
            ratios = []
            for r in okr:
                b = base.get((r["session"], r["rep"]))
                if b:
                    ratios.append(fnum(r["tok_s"]) / b[0])
            if ratios:
                delta = median(ratios) - 1
            elif med is not None and base_med:
                delta = med / base_med - 1
        acc = median([fnum(r["accept_len"]) for r in okr if fnum(r["accept_len"]) is not None])
        toks = sorted({r["tokens"] for r in okr if r["tokens"]})
        hashes = [r["token_hash"] for r in okr if r["token_hash"]]
        if not hashes:
            same = "—"
        elif ref is None:
            same = "?"
        else:
            nd = sum(1 for h in hashes if h != ref)
            same = "same" if nd == 0 else "**DIFF** (%d of %d)" % (nd, len(hashes))
        cyc = median([fnum(r["cycle_ms"]) for r in okr if fnum(r["cycle_ms"]) is not None])
        loss = [fnum(r["specprof_loss"]) for r in okr if fnum(r["specprof_loss"]) is not None]
        L.append("| %s | %d / %d | %s | %s | %s | %s | %s | %s | %s |" % (
            LABEL[m], len(okr), len(mr),
            ("%s [%s–%s]" % (fmt(med, 1), fmt(min(tps), 1), fmt(max(tps), 1))) if tps else "—",
            "—" if m == "none" else pct(delta), fmt(acc), ",".join(toks) or "—", same, fmt(cyc),
            ("%d" % max(loss)) if loss and m in SPECPROF_METHODS else "—"))
    # --cupti-detach: what the detach cost the application thread that ran it.
    for m in DETACH_METHODS:
        ds, refused, quiet = [], 0, [0, 0, 0]
        for r in wr:
            if r["method"] != m or not _status_ok(r):
                continue
            try:
                d = (json.loads(r.get("info_json") or "{}").get("specprof") or {}).get("detach")
            except ValueError:
                d = None
            if d and d.get("refused"):
                refused += 1
                quiet[min(int(d.get("quiet") or 0), 2)] += 1
            elif d:
                d.setdefault("stall_ms", d.get("stall_ms_max"))  # results written before the detach was final
                ds.append(d)
        runs = len([r for r in wr if r["method"] == m and _status_ok(r)])
        if ds:
            L.append("")
            L.append("%s: CUPTI detached in %d of %d runs; the application thread that ran the detach waited "
                     "%s ms (median; longest %s ms)." % (
                         LABEL[m], len(ds), runs,
                         fmt(median([d["stall_ms"] for d in ds]), 3), fmt(max(d["stall_ms"] for d in ds), 3)))
        if refused:
            L.append("")
            L.append("%s: CUPTI not finalized in %d of %d runs: the process had built CUDA graphs, whose "
                     "launches fail once CUPTI is finalized; instead CUPTI stayed attached as it was in %d, had "
                     "every callback turned off in %d, and was also unsubscribed in %d." % (
                         LABEL[m], refused, runs, quiet[0], quiet[1], quiet[2]))
    return L


METRIC_LABEL = {"gpu_elapsed": "gpu elapsed (truth)", "gpu_span": "gpu span", "gpu_busy": "gpu busy",
                "gpu_active": "gpu active", "gpu_elapsed_sp": "gpu elapsed", "gpu_host_gap": "host gap before",
                "gpu_elapsed_ev": "CUDA events, same run",
                "gpu_kernel": "kernel sum", "cpu_span": "cpu span", "sync_wait": "sync wait",
                "wall_sync": "wall+sync", "wall": "wall", "cpu_sampled": "cpu sampled"}
METHOD_METRICS = [("cudaev", "gpu_elapsed"), ("full", "gpu_active"), ("full", "gpu_elapsed_sp"), ("full", "gpu_host_gap"),
                  ("full", "gpu_span"), ("full", "gpu_busy"), ("full", "gpu_kernel"), ("full", "cpu_span"), ("full", "cpu_sampled"),
                  ("fullev", "gpu_elapsed_ev"), ("fullev", "gpu_elapsed_sp"), ("fullev", "gpu_host_gap"), ("fullev", "gpu_active"),
                  ("fullev", "gpu_busy"), ("fullgraph", "gpu_active"), ("fullgraph", "gpu_elapsed_sp"), ("fullgraph", "gpu_host_gap"),
                  ("ebpf", "cpu_span"), ("ebpf", "sync_wait"), ("ebpf", "cpu_sampled"), ("torchprof", "gpu_span"), ("torchprof", "gpu_busy"),
                  ("torchprof", "gpu_kernel"), ("v3", "wall_sync"), ("v4", "wall")]
# The figures shown for any other specprof method that has them (the sampled and duty modes: their
# GPU figures are those of the cycles their windows measured).
OTHER_METHOD_METRICS = ["gpu_active", "gpu_elapsed_sp", "cpu_span"]
COMPARE_TO_TRUTH = {"gpu_span", "gpu_busy", "gpu_kernel", "gpu_active", "gpu_elapsed_sp", "wall_sync", "wall"}


def phase_table(wr):
    vals = {}   # (method, metric, phase) -> [ms]
    phases = set()
    for r in wr:
        if not _status_ok(r) and r["status"] != "partial":
            continue
        try:
            d = json.loads(r["phases_json"] or "{}")
        except ValueError:
            continue
        for ph, md in d.items():
            for metric, v in md.items():
                if metric == "n" or fnum(v) is None:
                    continue
                vals.setdefault((r["method"], metric, ph), []).append(fnum(v))
                phases.add(ph)
    if not vals:
        return ["(no per-phase figures yet)"]
    order = [p for p in PHASE_ORDER if p in phases] + sorted(p for p in phases if p not in PHASE_ORDER)
    truth = {ph: median(vals.get(("cudaev", "gpu_elapsed", ph), [])) for ph in order}
    # (c8) records CUDA events itself: its figures are compared with those, on the same timeline.
    same_run = {ph: median(vals.get(("fullev", "gpu_elapsed_ev", ph), [])) for ph in order}
    L = ["Per-phase time, ms per occurrence (median over runs; in parentheses vs (g), and for (c8) vs "
         "the CUDA events of its own runs; Σ: the sum of the row's medians):", "",
         "| method | figure | " + " | ".join(order) + " | Σ |",
         "|---|---|" + "---|" * (len(order) + 1)]
    listed = {m for m, _ in METHOD_METRICS}
    others = [(m, metric) for m in METHODS + EXTRA_METHODS if m not in listed for metric in OTHER_METHOD_METRICS]
    for m, metric in METHOD_METRICS + others:
        if not any((m, metric, ph) in vals for ph in order):
            continue
        cells, tot = [], 0.0
        for ph in order:
            v = median(vals.get((m, metric, ph), []))
            tot += v or 0.0
            t = same_run.get(ph) if m == "fullev" else truth.get(ph)
            if v is None:
                cells.append("—")
            elif m != "cudaev" and metric in COMPARE_TO_TRUTH and t:
                cells.append("%s (%s, %+.0f µs)" % (fmt(v), pct(v / t - 1), (v - t) * 1e3))
            else:
                cells.append(fmt(v))
        cells.append(fmt(tot))
        L.append("| %s | %s | %s |" % (LABEL[m], METRIC_LABEL.get(metric, metric), " | ".join(cells)))
    return L


def render_only(a):
    """Merges result directories (rows deduplicated by run id) and rewrites the table."""
    os.makedirs(a.out, exist_ok=True)
    dirs = [a.out] + [os.path.abspath(d) for d in a.merge]
    rows, phase_rows, seen, versions = [], [], set(), []
    for d in dirs:
        got = load_rows(os.path.join(d, "raw.csv"))
        ids = set()
        for r in got:
            if r["run_id"] not in seen:
                rows.append(r)
                ids.add(r["run_id"])
        seen |= ids
        pp = os.path.join(d, "phases.csv")
        if os.path.exists(pp):
            with open(pp, newline="") as f:
                phase_rows.extend(x for x in csv.DictReader(f) if x.get("run_id") in ids)
        vp = os.path.join(d, "versions.txt")
        if os.path.exists(vp):
            with open(vp) as f:
                versions.append(f.read().strip())
        log("[suite] %s: %d rows" % (d, len(got)))
    if not rows:
        log("[suite] no rows in %s" % ", ".join(dirs))
        return 1
    if a.merge:
        for path, fields, data in ((os.path.join(a.out, "raw.csv"), FIELDS, rows),
                                   (os.path.join(a.out, "phases.csv"), PHASE_FIELDS, phase_rows)):
            with open(path + ".tmp", "w", newline="") as f:
                wr = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
                wr.writeheader()
                for r in data:
                    wr.writerow(r)
            os.replace(path + ".tmp", path)
        with open(os.path.join(a.out, "versions.txt"), "w") as f:
            f.write("\n".join(dict.fromkeys(versions)) + "\n")
    sessions = sorted({r["session"] for r in rows})
    meta = {"started": "%s (sessions %s)" % (sessions[0], ", ".join(sessions)), "rendered": True,
            "command": " ".join(shlex.quote(x) for x in sys.argv), "dry_run": False,
            "versions": "\n".join(dict.fromkeys(versions)), "notes": ["table rendered from raw.csv (--render-only)"]}
    text = render(rows, meta, a)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text)
    log("[suite] %d rows -> %s" % (len(rows), os.path.join(a.out, "table.md")))
    return 0


def main(argv=None):
    a = parse_args(argv)
    if a.render_only:
        return render_only(a)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return Suite(a).main()


if __name__ == "__main__":
    sys.exit(main())
