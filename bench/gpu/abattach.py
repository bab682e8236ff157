#!/usr/bin/env python3
"""specprof's cost on HF assisted generation, measured inside one process (issue 6).

HF's throughput differs by up to ±19 % from one process to the next on the H200 host (docs/
benchmarks/h200.md §11e), more than any cost to be measured, so runs of separate processes cannot
rank it. Here one workload process (hf_assisted.py --repeat-s) generates the same prompts in turn,
timing each generate, while this driver attaches `specprof attach` to it for --on-s seconds and
leaves it alone for --off-s seconds, in turn. Each generate is then sorted:

- on:  it started after the agent logged "probes attached" and ended before the attach's
       --duration was up (so the probes were in place the whole time);
- off: no specprof process existed from --margin-s before it started to --margin-s after it ended;
- the rest (the agent starting, symbolising or writing its report) is left out.

Greedy decoding makes each prompt's generates the same work; every repeat must give the first
pass's tokens (the workload checks). The cost is estimated per on-window against the off-windows
on either side of it, prompt by prompt, which cancels the slow drift of the host's speed.

    python3 bench/gpu/abattach.py --specprof build/specprof --out /tmp/ab -- --new-tokens 48

Writes OUT/table.md, OUT/ab.json (every generate and window) and OUT/on-N/ (each attach's
report and log). With --cupti off (the default attach flags) this measures eBPF only: the CUPTI
library cannot be injected into a running process.
"""

import argparse
import calendar
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACHED = re.compile(r'^time=(\S+) level=INFO msg="probes attached"')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--specprof", help="the specprof executable")
    p.add_argument("--python", default=sys.executable, help="python for the workload")
    p.add_argument("--workload", default=os.path.join(HERE, "hf_assisted.py"))
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--on-s", type=float, default=12.0, help="seconds of each attach (--duration)")
    p.add_argument("--off-s", type=float, default=8.0, help="seconds between attaches")
    p.add_argument("--total-s", type=float, default=240.0, help="seconds of alternation")
    p.add_argument("--margin-s", type=float, default=0.5,
                   help="an off generate keeps this far from any specprof process")
    p.add_argument("--attach-args", default="--cupti off --spec-metrics off --preset hf-assisted",
                   help="extra flags of `specprof attach` (default: eBPF only)")
    p.add_argument("--attach-cmd", default="",
                   help="instead of `specprof attach`: a command template with {pid}, {duration} (e.g. 12s) "
                        "and {out} that logs 'probes attached' like specprof, e.g. "
                        "'build/emptyprobe -pid {pid} -duration {duration}' (the uprobe traps alone)")
    p.add_argument("--ready-timeout-s", type=float, default=600.0,
                   help="how long the workload may take to build, calibrate and start repeating")
    p.add_argument("workload_args", nargs="*", help="after --: flags of the workload")
    a = p.parse_args(argv)
    if a.on_s <= 0 or a.off_s <= 0 or a.total_s <= 0:
        p.error("--on-s, --off-s and --total-s must be > 0")
    if not a.specprof and not a.attach_cmd:
        p.error("give --specprof or --attach-cmd")
    return a


def log(msg):
    sys.stderr.write("[abattach] %s\n" % msg)
    sys.stderr.flush()


def parse_log_time(s):
    """Seconds since the epoch of a Go slog TextHandler time (RFC 3339, e.g.
    2026-11-30T09:32:31.304Z or ...304+00:00)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % s)
    base = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    frac = float(m.group(2) or 0.0)
    tz = m.group(3)
    off = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return base + frac - off


def attached_at(stderr_text):
    """The time of the last "probes attached" line (one per hooked library), or None."""
    t = None
    for line in stderr_text.splitlines():
        m = ATTACHED.match(line)
        if m:
            t = parse_log_time(m.group(1))
    return t


def attach_cmd(a, pid, odir):
    """The command of one on-window."""
    if a.attach_cmd:
        return shlex.split(a.attach_cmd.format(pid=pid, duration="%gs" % a.on_s, out=odir))
    return [a.specprof, "attach", "--pid", str(pid), "--duration", "%gs" % a.on_s, "-q",
            "--interval", "0", "-o", odir] + shlex.split(a.attach_args)


def run(a):
    os.makedirs(a.out, exist_ok=True)
    ready = os.path.join(a.out, "ready")
    result = os.path.join(a.out, "workload.json")
    for f in (ready, result):
        if os.path.exists(f):
            os.remove(f)
    # The repeats outlast the alternation; the workload ends by itself.
    cmd = [a.python, a.workload, "--repeat-s", str(a.total_s + 5), "--ready-file", ready,
           "--result", result] + a.workload_args
    log("workload: %s" % " ".join(shlex.quote(c) for c in cmd))
    wl_err = open(os.path.join(a.out, "workload.stderr"), "w")
    wl = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=wl_err)
    windows = []
    try:
        t_wait = time.time()
        while not os.path.exists(ready):
            if wl.poll() is not None:
                raise RuntimeError("the workload exited (rc %s) before repeating: see %s"
                                   % (wl.returncode, os.path.join(a.out, "workload.stderr")))
            if time.time() - t_wait > a.ready_timeout_s:
                raise RuntimeError("the workload did not start repeating within %.0f s" % a.ready_timeout_s)
            time.sleep(0.2)
        log("workload pid %d repeating; alternating off %.0f s / on %.0f s for %.0f s"
            % (wl.pid, a.off_s, a.on_s, a.total_s))
        t_end = time.time() + a.total_s
        n = 0
        while time.time() + a.off_s + a.on_s <= t_end and wl.poll() is None:
            time.sleep(a.off_s)
            n += 1
            odir = os.path.join(a.out, "on-%d" % n)
            os.makedirs(odir, exist_ok=True)
            acmd = attach_cmd(a, wl.pid, odir)
            t_spawn = time.time()
            with open(os.path.join(odir, "stderr.txt"), "w") as ef:
                rc = subprocess.call(acmd, stdout=subprocess.DEVNULL, stderr=ef)
            t_exit = time.time()
            with open(os.path.join(odir, "stderr.txt")) as ef:
                t_att = attached_at(ef.read())
            w = {"n": n, "spawn": t_spawn, "attached": t_att, "until": t_spawn + a.on_s, "exit": t_exit,
                 "rc": rc}
            windows.append(w)
            log("attach %d: rc %d, probes in place %.1f s after spawn, exited after %.1f s"
                % (n, rc, (t_att - t_spawn) if t_att else float("nan"), t_exit - t_spawn))
        rc = wl.wait(timeout=a.on_s + a.total_s + 120)
    except BaseException:
        if wl.poll() is None:
            wl.send_signal(signal.SIGTERM)
            try:
                wl.wait(timeout=30)
            except subprocess.TimeoutExpired:
                wl.kill()
        raise
    finally:
        wl_err.close()
    if not os.path.exists(result):
        raise RuntimeError("the workload wrote no result (rc %s): see %s"
                           % (rc, os.path.join(a.out, "workload.stderr")))
    with open(result) as f:
        res = json.load(f)
    return res, windows


def classify(repeats, windows, margin):
    """Sorts each generate into 'on', 'off' or None (see the module's doc), with the index of its
    on-window (on), or of the next on-window after it (off; len(windows) after the last)."""
    out = []
    for r in repeats:
        kind, idx = None, None
        for i, w in enumerate(windows):
            if w["rc"] == 0 and w["attached"] is not None and w["attached"] <= r["t0"] and r["t1"] <= w["until"]:
                kind, idx = "on", i
                break
        if kind is None and not any(r["t0"] - margin < w["exit"] and w["spawn"] < r["t1"] + margin
                                    for w in windows):
            kind = "off"
            idx = next((i for i, w in enumerate(windows) if w["spawn"] >= r["t1"]), len(windows))
        out.append((kind, idx))
    return out


def estimate(repeats, windows, margin):
    """Per on-window: the mean over its generates of (duration / median duration of the same
    prompt in the off-windows just before and after it) − 1. Returns the per-window estimates and
    the overall figures."""
    cls = classify(repeats, windows, margin)
    off_by = {}   # (off-window index, prompt) -> durations; off-window i lies before on-window i
    on = []
    for r, (kind, idx) in zip(repeats, cls):
        d = r["t1"] - r["t0"]
        if kind == "off":
            off_by.setdefault((idx, r["prompt"]), []).append(d)
        elif kind == "on":
            on.append((idx, r["prompt"], d, r["tokens"]))
    per_window = []
    for i in range(len(windows)):
        ratios = []
        for idx, p, d, _ in on:
            if idx != i:
                continue
            ref = off_by.get((i, p), []) + off_by.get((i + 1, p), [])
            if ref:
                ratios.append(d / statistics.median(ref))
        if ratios:
            per_window.append({"window": i + 1, "generates": len(ratios), "slowdown": statistics.mean(ratios) - 1})
    n_on = sum(1 for k, _ in cls if k == "on")
    n_off = sum(1 for k, _ in cls if k == "off")
    tok_on = sum(r["tokens"] for r, (k, _) in zip(repeats, cls) if k == "on")
    s_on = sum(r["t1"] - r["t0"] for r, (k, _) in zip(repeats, cls) if k == "on")
    tok_off = sum(r["tokens"] for r, (k, _) in zip(repeats, cls) if k == "off")
    s_off = sum(r["t1"] - r["t0"] for r, (k, _) in zip(repeats, cls) if k == "off")
    summary = {"generates": len(repeats), "on": n_on, "off": n_off, "left_out": len(repeats) - n_on - n_off,
               "tok_s_on": tok_on / s_on if s_on else None, "tok_s_off": tok_off / s_off if s_off else None,
               "windows": len(windows), "windows_failed": sum(1 for w in windows if w["rc"] != 0 or w["attached"] is None)}
    sl = [w["slowdown"] for w in per_window]
    if sl:
        summary.update(slowdown_median=statistics.median(sl), slowdown_min=min(sl), slowdown_max=max(sl),
                       slowdown_mean=statistics.mean(sl))
    return per_window, summary


def render(a, res, windows, per_window, summary):
    pct = lambda x: "—" if x is None else "%+.2f %%" % (100 * x)
    tps = lambda x: "—" if x is None else "%.2f" % x
    lines = ["# specprof attached and detached in turn, one HF process (bench/gpu/abattach.py)", "",
             "Command: `%s`" % " ".join(shlex.quote(c) for c in sys.argv), "",
             "Workload: %s; versions %s; accept length %s; %d repeats of %d prompts, every one with the "
             "measured loop's tokens: %s." % (os.path.basename(a.workload), json.dumps(res.get("versions", {})),
                                              "%.3f" % res["accept_len"] if res.get("accept_len") else "—",
                                              summary["generates"], len(set(r["prompt"] for r in res["repeats"])),
                                              "yes" if all(r["same"] for r in res["repeats"]) else "NO"),
             "",
             "Attached with: `%s`; on %.0f s / off %.0f s; %d attaches (%d failed or without \"probes attached\")."
             % (" ".join(attach_cmd(a, "PID", "DIR")), a.on_s, a.off_s, summary["windows"],
                summary["windows_failed"]), "",
             "| generates | on | off | left out | tok/s on | tok/s off | slowdown per on-window, median [min–max] | mean |",
             "|---|---|---|---|---|---|---|---|",
             "| %d | %d | %d | %d | %s | %s | %s [%s – %s] | %s |" % (
                 summary["generates"], summary["on"], summary["off"], summary["left_out"],
                 tps(summary["tok_s_on"]), tps(summary["tok_s_off"]), pct(summary.get("slowdown_median")),
                 pct(summary.get("slowdown_min")), pct(summary.get("slowdown_max")), pct(summary.get("slowdown_mean"))),
             "", "Per on-window (its generates against the same prompts' generates in the off-windows on either side):", "",
             "| window | generates | slowdown |", "|---|---|---|"]
    lines += ["| %d | %d | %s |" % (w["window"], w["generates"], pct(w["slowdown"])) for w in per_window]
    lines += ["", "slowdown: generate time with specprof attached / without − 1 (a tok/s cost of "
              "1 − 1/(1 + slowdown))."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    a = parse_args(argv)
    res, windows = run(a)
    if not res.get("ok"):
        log("workload error: %s" % res.get("error"))
    repeats = res.get("repeats") or []
    per_window, summary = estimate(repeats, windows, a.margin_s)
    with open(os.path.join(a.out, "ab.json"), "w") as f:
        json.dump({"windows": windows, "repeats": repeats, "per_window": per_window, "summary": summary,
                   "workload": {k: v for k, v in res.items() if k != "repeats"}}, f, indent=1)
    text = render(a, res, windows, per_window, summary)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0 if res.get("ok") and per_window else 1


if __name__ == "__main__":
    sys.exit(main())
