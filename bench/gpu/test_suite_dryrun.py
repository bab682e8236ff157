#!/usr/bin/env python3
"""Checks of the GPU benchmark suite that run on a machine without a GPU, torch or transformers.

    python3 bench/gpu/test_suite_dryrun.py [-v]

- the driver (bench/gpu/suite.py --dry-run, with a fake `specprof` written here): interleaving,
  calibration hand-off, raw.csv / phases.csv / table.md, the budget, specprof and workload
  failures, hash mismatches, a hung run killed at its timeout, SIGTERM to the suite;
- specprof's report.json parsing and the per-method phase figures;
- benchphase (timing modes, the torch.profiler trace aggregation, calibration search);
- the SGLang-shaped EAGLE worker (bench/gpu/sglang/...) on a tiny fake `torch` defined in this
  file (1-D integer tensors, CUDA-graph capture emulated by recording the captured ops and
  re-running them on the same buffers at replay): the tokens it emits must be exactly the
  target's greedy sequence, eager and with graphs, and the accept lengths must be plausible;
- the workload scripts import and parse their flags with that fake torch / transformers.
The fake torch lives only in this file and is installed in sys.modules only inside the tests that
need it.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE = os.path.join(HERE, "suite.py")
sys.path.insert(0, HERE)

import benchphase  # noqa: E402
import suite  # noqa: E402

FAKE_SPECPROF = textwrap.dedent(r'''
    #!/usr/bin/env python3
    # Fake `specprof run`: runs the command after "--", writes -o DIR/report.json.
    import json, os, subprocess, sys
    args = sys.argv[1:]
    assert args and args[0] == "run", args
    i = args.index("--")
    flags, cmd = args[1:i], args[i + 1:]
    out = flags[flags.index("-o") + 1]
    cupti = flags[flags.index("--cupti") + 1]
    preset = flags[flags.index("--preset") + 1]
    with open(os.environ["FAKE_SPECPROF_LOG"], "a") as f:
        f.write(json.dumps({"flags": flags, "cmd0": cmd[0]}) + "\n")
    if os.environ.get("FAKE_SPECPROF_FAIL") == cupti:
        sys.stderr.write("specprof: fake failure (--cupti %s)\n" % cupti)
        sys.exit(3)
    rc = subprocess.call(cmd)
    os.makedirs(out, exist_ok=True)
    names = ["spec.draft", "spec.verify", "spec.cycle_other"] if preset == "hf-assisted" else \
        ["spec.draft", "spec.verify", "spec.accept", "spec.draft_extend"]
    gt = {"spec.draft": 0.5, "spec.verify": 1.0, "spec.accept": 0.05, "spec.draft_extend": 0.2,
          "spec.cycle_other": 0.1}
    phases = []
    for n in names:
        p = {"phase": n, "cycles": 100, "launches": 300, "graph_launches": 0, "syncs": 1,
             "sync_wait_ns": 10000, "cpu_span_ns": int(gt[n] * 0.3e6 * 100)}
        if cupti == "on":
            p.update(gpu_cycles=100, gpu_kernels=1000, gpu_busy_ns=int(gt[n] * 0.97e6 * 100),
                     gpu_span_ns=int(gt[n] * 1.0e6 * 100), gpu_kernel_ns=int(gt[n] * 0.97e6 * 100),
                     gpu_active_ns=int(gt[n] * 0.99e6 * 100), gpu_elapsed_ns=int(gt[n] * 1.0e6 * 100))
        phases.append(p)
    rep = {"preset": preset, "phase_order": names, "events": 12345,
           "loss": {"ringbuf_full": 0, "decode_errors": 0},
           "processes": [{"pid": 1, "cmdline": " ".join(cmd), "libraries": [], "problems": [],
                          "threads": [{"tid": 1, "cycles": 0, "phases": []},
                                      {"tid": 2, "cycles": 100, "cycle_ns": 300000000,
                                       "gpu": cupti == "on", "phases": phases, "outside": [],
                                       "calls": 1000, "resolved_in_user_space": 0}]}]}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f)
    sys.exit(rc)
''').lstrip()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class DryRunBase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="suite-dry-")
        self.fake = os.path.join(self.tmp, "specprof")
        with open(self.fake, "w") as f:
            f.write(FAKE_SPECPROF)
        os.chmod(self.fake, 0o755)
        with open(os.path.join(self.tmp, "libspecprof_cupti.so"), "w") as f:
            f.write("fake")
        self.splog = os.path.join(self.tmp, "specprof.log")
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        subprocess.call(["rm", "-rf", self.tmp])

    def suite(self, *args, env=None, timeout=240, background=False):
        e = dict(os.environ)
        e.update({"FAKE_SPECPROF_LOG": self.splog, "SPECPROF_SUITE_DRY_SLEEP": "0.02"})
        e.update(env or {})
        cmd = [sys.executable, SUITE, "--dry-run", "--specprof", self.fake, "--out", self.out] + list(args)
        if background:
            return subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        r = subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
        self.last_output = r.stdout + r.stderr
        return r

    def rows(self):
        return read_csv(os.path.join(self.out, "raw.csv"))

    def table(self):
        with open(os.path.join(self.out, "table.md")) as f:
            return f.read()


class TestDriver(DryRunBase):
    def test_full_dry_run(self):
        r = self.suite("--reps", "2")
        self.assertEqual(r.returncode, 0, self.last_output)
        rows = self.rows()
        calib = [x for x in rows if x["method"] == "calib"]
        runs = [x for x in rows if x["method"] != "calib"]
        self.assertEqual(sorted(x["workload"] for x in calib), ["eagle", "hf"])
        self.assertEqual(len(runs), 3 * 7 * 2)
        bad = [(x["run_id"], x["status"], x["error"]) for x in runs if x["status"] != "ok"]
        self.assertEqual(bad, [])
        # Interleaving: per (rep, workload) the 7 methods in a row, each once; rotated per rep.
        seqs = {}
        for x in runs:
            seqs.setdefault((x["rep"], x["workload"]), []).append(x["method"])
        for k, v in seqs.items():
            self.assertEqual(sorted(v), sorted(suite.METHODS), k)
        self.assertNotEqual(seqs[("1", "hf")], seqs[("2", "hf")])
        self.assertEqual(seqs[("2", "hf")], suite.METHODS[1:] + suite.METHODS[:1])
        order = [(x["rep"], x["workload"]) for x in runs]
        blocks = [order[i:i + 7] for i in range(0, len(order), 7)]
        for b in blocks:
            self.assertEqual(len(set(b)), 1, "methods of one (rep, workload) are not contiguous")
        # Calibration hand-off and specprof invocation.
        for x in runs:
            with open(os.path.join(self.out, "runs", x["run_id"], "cmd.txt")) as f:
                cmd = f.read()
            self.assertIn("--noise-scale 0.125 --result", cmd)
            self.assertIn("--timing " + suite.TIMING[x["method"]], cmd)
            if x["method"] in ("ebpf", "full"):
                self.assertTrue(cmd.startswith(self.fake + " run "), cmd)
                self.assertIn("--cupti " + ("on" if x["method"] == "full" else "off"), cmd)
                self.assertIn("--preset " + suite.PRESET[x["workload"]], cmd)
                if x["method"] == "full":
                    self.assertIn("--cupti-lib " + os.path.join(self.tmp, "libspecprof_cupti.so"), cmd)
                self.assertEqual(x["specprof_cycles"], "100")
            else:
                self.assertNotIn(self.fake, cmd)
        with open(self.splog) as f:
            self.assertEqual(len(f.readlines()), 3 * 2 * 2)
        # Per-phase figures.
        ph = read_csv(os.path.join(self.out, "phases.csv"))
        got = {(p["workload"], p["method"], p["phase"], p["metric"]) for p in ph}
        self.assertIn(("eagle-graph", "full", "spec.accept", "gpu_span"), got)
        self.assertIn(("eagle-eager", "ebpf", "spec.draft_extend", "cpu_span"), got)
        self.assertIn(("hf", "cudaev", "spec.verify", "gpu_elapsed"), got)
        self.assertIn(("hf", "torchprof", "spec.draft", "gpu_kernel"), got)
        self.assertIn(("eagle-graph", "v3", "spec.verify", "wall_sync"), got)
        self.assertNotIn(("hf", "ebpf", "spec.verify", "gpu_span"), got)
        t = self.table()
        for w in suite.WORKLOADS:
            self.assertIn("## %s" % w, t)
        self.assertIn("| (c) specprof eBPF + CUPTI | 2 / 2 |", t)
        self.assertIn("| (g) CUDA events (ground truth) | gpu elapsed (truth) |", t)
        self.assertIn("| (c) specprof eBPF + CUPTI | gpu span | 0.500 (+0.0 %, +0 µs)", t)
        self.assertNotIn("**DIFF**", t)
        self.assertNotIn("partial results", t)
        self.assertTrue(os.path.exists(os.path.join(self.out, "versions.txt")))
        # A second call appends to the same directory (two device calls, one table).
        r = self.suite("--reps", "1", "--workloads", "hf", "--methods", "none,full")
        self.assertEqual(r.returncode, 0, self.last_output)
        rows2 = self.rows()
        self.assertEqual(len(rows2), len(rows) + 1 + 2)
        self.assertEqual(len({x["session"] for x in rows2}), 2)
        self.assertIn("| (c) specprof eBPF + CUPTI | 3 / 3 |", self.table())

    def test_split_and_same_run_methods(self):
        """(c8) fullev: specprof plus CUDA events in one run, its elapsed compared with those
        events; (c9-c11): the standing-cost split, with their environment and duty flags."""
        r = self.suite("--workloads", "eagle-graph", "--methods", "cudaev,full,fullev,idlenoov,idleoff,dutynoov",
                       "--reps", "1")
        self.assertEqual(r.returncode, 0, self.last_output)
        runs = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        self.assertEqual(sorted(runs), sorted(["cudaev", "full", "fullev", "idlenoov", "idleoff", "dutynoov"]))
        for m, x in runs.items():
            self.assertEqual(x["status"], "ok", (m, x["error"]))
            with open(os.path.join(self.out, "runs", x["run_id"], "cmd.txt")) as f:
                cmd = f.read()
            if m == "fullev":
                self.assertIn("--timing cuda-events", cmd)
            if m in ("idlenoov", "idleoff"):
                self.assertIn("--cupti-duty 1ms/60s", cmd)
            if m == "dutynoov":
                self.assertIn("--cupti-duty 100ms/1s", cmd)
        ph = read_csv(os.path.join(self.out, "phases.csv"))
        got = {(p["method"], p["phase"], p["metric"]) for p in ph}
        for metric in ("gpu_active", "gpu_elapsed_sp"):
            self.assertIn(("full", "spec.verify", metric), got)
        self.assertIn(("fullev", "spec.verify", "gpu_elapsed_ev"), got)
        t = self.table()
        self.assertIn("| (c) specprof eBPF + CUPTI | gpu active | ", t)
        self.assertIn("| (c8) specprof full + CUDA events in the same run | CUDA events, same run | ", t)
        # (c8)'s elapsed is compared with its own runs' events (1.0 × truth here, elapsed 1.0 ×):
        self.assertIn("| (c8) specprof full + CUDA events in the same run | gpu elapsed | 0.500 (+0.0 %, +0 µs)", t)

    def test_detach_methods(self):
        """(c12-c14): a few duty-cycled windows, then CUPTI detached for good."""
        r = self.suite("--workloads", "eagle-graph", "--methods", "none,fulldetach,fulldetachlong,idledetach",
                       "--reps", "1")
        self.assertEqual(r.returncode, 0, self.last_output)
        runs = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        self.assertEqual(sorted(runs), sorted(["none", "fulldetach", "fulldetachlong", "idledetach"]))
        want = {"fulldetach": "--cupti-duty 100ms/1s --cupti-windows 6", "fulldetachlong": "--cupti-duty 500ms/5s --cupti-windows 2",
                "idledetach": "--cupti-duty 1ms/60s --cupti-windows 1"}
        for m, dut in want.items():
            self.assertEqual(runs[m]["status"], "ok", (m, runs[m]["error"]))
            with open(os.path.join(self.out, "runs", runs[m]["run_id"], "cmd.txt")) as f:
                cmd = f.read()
            self.assertIn(dut, cmd)
            self.assertIn("--cupti-detach", cmd)
        self.assertIn("| (c12) as (c4), 6 windows, then CUPTI detached (--cupti-windows 6 --cupti-detach) | 1 / 1 |",
                      self.table())

    def test_probe_window_methods(self):
        """(b3), (c18): the probes in windows; with GPU records, held while CUPTI traces 2 windows."""
        r = self.suite("--workloads", "hf", "--methods", "none,ebpfwin,probedetach", "--reps", "1")
        self.assertEqual(r.returncode, 0, self.last_output)
        runs = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        self.assertEqual(sorted(runs), sorted(["none", "ebpfwin", "probedetach"]))
        for m, want, not_want in (("ebpfwin", ["--probe-duty 250ms/10s", "--cupti off"], ["--cupti-duty"]),
                                  ("probedetach", ["--probe-duty 250ms/10s", "--cupti on", "--cupti-duty 500ms/2s",
                                                   "--cupti-windows 2", "--cupti-detach"], [])):
            self.assertEqual(runs[m]["status"], "ok", (m, runs[m]["error"]))
            with open(os.path.join(self.out, "runs", runs[m]["run_id"], "cmd.txt")) as f:
                cmd = f.read()
            for w in want:
                self.assertIn(w, cmd)
            for w in not_want:
                self.assertNotIn(w, cmd)
        self.assertIn("| (b3) specprof eBPF only, probes in windows (--probe-duty 250ms/10s) | 1 / 1 |", self.table())

    def test_probe_cycles_method(self):
        """(c22): 4 GPU windows opened on decode cycles, probes held, detach, then probe windows."""
        r = self.suite("--workloads", "hf", "--methods", "none,probecycles", "--reps", "1")
        self.assertEqual(r.returncode, 0, self.last_output)
        runs = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        self.assertEqual(runs["probecycles"]["status"], "ok", runs["probecycles"]["error"])
        with open(os.path.join(self.out, "runs", runs["probecycles"]["run_id"], "cmd.txt")) as f:
            cmd = f.read()
        for w in ("--probe-duty 250ms/10s", "--cupti-duty 500ms/4s", "--cupti-windows 4", "--cupti-detach",
                  "--cupti-duty-start cycles"):
            self.assertIn(w, cmd)

    def test_graph_detach_methods(self):
        """(c19), (c20): 3 duty windows, then the detach of a graph process (callbacks off / unsubscribed)."""
        r = self.suite("--workloads", "eagle-graph", "--methods", "none,graphquiet,graphunsub", "--reps", "1")
        self.assertEqual(r.returncode, 0, self.last_output)
        runs = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        self.assertEqual(sorted(runs), sorted(["none", "graphquiet", "graphunsub"]))
        for m in ("graphquiet", "graphunsub"):
            self.assertEqual(runs[m]["status"], "ok", (m, runs[m]["error"]))
            with open(os.path.join(self.out, "runs", runs[m]["run_id"], "cmd.txt")) as f:
                cmd = f.read()
            for w in ("--cupti on", "--cupti-duty 100ms/1s", "--cupti-windows 3", "--cupti-detach"):
                self.assertIn(w, cmd)
        self.assertIn("| (c20) as (c19), and CUPTI unsubscribed (SPECPROF_CUPTI_GRAPH_DETACH=unsubscribe) | 1 / 1 |",
                      self.table())

    def test_pin(self):
        """--pin: the workload on one core, specprof on the others (taskset around each)."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            self.skipTest("needs two CPUs")  # CI's machines have two or more
        cpu = cpus[-1]
        wl, rest = suite.pin_sets(cpu)
        self.assertIn(str(cpu), wl.split(","))
        self.assertNotIn(str(cpu), rest.split(","))
        r = self.suite("--workloads", "eagle-graph", "--methods", "none,ebpf", "--reps", "1", "--pin", str(cpu))
        self.assertEqual(r.returncode, 0, self.last_output)
        runs = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        for m in ("none", "ebpf"):
            self.assertEqual(runs[m]["status"], "ok", (m, runs[m]["error"]))
            with open(os.path.join(self.out, "runs", runs[m]["run_id"], "cmd.txt")) as f:
                cmd = f.read()
            inner = cmd[cmd.index(" -- ") + 4:] if m == "ebpf" else cmd
            self.assertTrue(inner.startswith("taskset -c %s " % wl), cmd)
            if m == "ebpf":
                self.assertTrue(cmd.startswith("taskset -c %s " % rest), cmd)
        r = self.suite("--workloads", "eagle-graph", "--methods", "none", "--reps", "1", "--pin", "4096")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--pin 4096", self.last_output)

    def test_two_calls_merged(self):
        """Two device calls write two result dirs; --render-only --merge makes one table."""
        first = self.out
        r = self.suite("--reps", "1", "--workloads", "hf")
        self.assertEqual(r.returncode, 0, self.last_output)
        self.out = os.path.join(self.tmp, "out2")
        r = self.suite("--reps", "1", "--workloads", "eagle-graph,eagle-eager")
        self.assertEqual(r.returncode, 0, self.last_output)
        merged = os.path.join(self.tmp, "merged")
        r = subprocess.run([sys.executable, SUITE, "--render-only", "--out", merged, "--merge", first,
                            "--merge", self.out], cwd=ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.out = merged
        rows = self.rows()
        self.assertEqual(len(rows), 2 + 3 * 7)
        self.assertEqual(len({x["session"] for x in rows}), 2)
        t = self.table()
        for w in suite.WORKLOADS:
            self.assertIn("## %s" % w, t)
        self.assertNotIn("partial results", t)
        ph = read_csv(os.path.join(merged, "phases.csv"))
        self.assertEqual({p["workload"] for p in ph}, set(suite.WORKLOADS))
        # Rendering again in place (no --merge) keeps the rows.
        r = subprocess.run([sys.executable, SUITE, "--render-only", "--out", merged], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(len(self.rows()), 2 + 3 * 7)

    def test_export_for_a_device_call(self):
        """--export DIR: at most a few flat files (a device call returns 8 files from $OUT)."""
        import tarfile
        exp = os.path.join(self.tmp, "OUT")
        r = self.suite("--reps", "1", "--workloads", "eagle-graph", "--export", exp)
        self.assertEqual(r.returncode, 0, self.last_output)
        names = sorted(os.listdir(exp))
        self.assertEqual(len(names), 5, names)
        arch = [n for n in names if n.startswith("runs-") and n.endswith(".tar.gz")]
        self.assertEqual(len(arch), 1, names)
        self.assertEqual([n for n in names if n not in arch], ["phases.csv", "raw.csv", "table.md", "versions.txt"])
        with open(os.path.join(exp, "raw.csv")) as a, open(os.path.join(self.out, "raw.csv")) as b:
            self.assertEqual(a.read(), b.read())
        with tarfile.open(os.path.join(exp, arch[0])) as tar:
            members = tar.getnames()
        self.assertEqual(sum(1 for m in members if m.endswith("/result.json")), 7 + 1)
        self.assertEqual(sum(1 for m in members if m.endswith("specprof/report.json")), 2)
        for n in names:
            self.assertRegex(n, r"^[A-Za-z0-9._-]+$")

    def test_failures_are_recorded(self):
        r = self.suite("--reps", "1", env={
            "FAKE_SPECPROF_FAIL": "on",
            "SPECPROF_SUITE_DRY_FAIL": "eagle-eager:v3",
            "SPECPROF_SUITE_DRY_HASHDIFF": "hf:v4"})
        self.assertEqual(r.returncode, 0, self.last_output)
        st = {(x["workload"], x["method"]): x for x in self.rows() if x["method"] != "calib"}
        for w in suite.WORKLOADS:
            self.assertEqual(st[(w, "full")]["status"], "fail")
            self.assertIn("fake failure", st[(w, "full")]["error"])
            self.assertEqual(st[(w, "ebpf")]["status"], "ok")
        self.assertEqual(st[("eagle-eager", "v3")]["status"], "fail")
        self.assertIn("injected failure", st[("eagle-eager", "v3")]["error"])
        self.assertEqual(st[("eagle-graph", "v3")]["status"], "ok")
        t = self.table()
        self.assertIn("**DIFF** (1 of 1)", t)
        self.assertIn("## Runs that failed", t)
        self.assertIn("fake failure", t)

    def test_missing_specprof_and_calibration_failure(self):
        os.remove(self.fake)
        r = self.suite("--reps", "1", "--workloads", "eagle-graph",
                       env={"SPECPROF_SUITE_DRY_FAIL": "eagle-graph:calib"})
        self.assertEqual(r.returncode, 0, self.last_output)
        rows = self.rows()
        calib = [x for x in rows if x["method"] == "calib"]
        self.assertEqual([x["status"] for x in calib], ["fail"])
        st = {x["method"]: x for x in rows if x["method"] != "calib"}
        self.assertIn("specprof binary not found", st["ebpf"]["error"])
        self.assertEqual(st["none"]["status"], "ok")
        with open(os.path.join(self.out, "runs", st["none"]["run_id"], "cmd.txt")) as f:
            args = f.read().rsplit("--dry-workload", 1)[1]
        self.assertNotIn("--noise-scale", args)   # each run calibrates itself
        self.assertIn("calibration of eagle failed", self.table())

    def test_timeout_kills_the_run(self):
        pidfile = os.path.join(self.tmp, "hung.pid")
        r = self.suite("--reps", "1", "--workloads", "eagle-graph", "--methods", "none,full,v4",
                       "--run-timeout-s", "2", env={
                           "SPECPROF_SUITE_DRY_HANG": "eagle-graph:full",
                           "SPECPROF_SUITE_DRY_PIDFILE": pidfile})
        self.assertEqual(r.returncode, 0, self.last_output)
        st = {x["method"]: x for x in self.rows() if x["method"] != "calib"}
        self.assertEqual(st["full"]["status"], "timeout")
        self.assertEqual(st["v4"]["status"], "ok")
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
        time.sleep(0.2)
        self.assertFalse(os.path.exists("/proc/%d" % pid) and _state(pid) != "Z",
                         "the hung workload (pid %d) survived" % pid)

    def test_budget(self):
        r = self.suite("--reps", "3", "--budget-s", "4", env={"SPECPROF_SUITE_DRY_SLEEP": "0.4"})
        self.assertEqual(r.returncode, 0, self.last_output)
        rows = [x for x in self.rows() if x["method"] != "calib"]
        self.assertEqual(len(rows), 3 * 7 * 3)
        skipped = [x for x in rows if x["status"] == "skipped"]
        ok = [x for x in rows if x["status"] == "ok"]
        self.assertTrue(skipped and ok, (len(skipped), len(ok)))
        self.assertTrue(all("budget" in x["error"] for x in skipped))
        self.assertIn("skipped", self.table())

    def test_sigterm_leaves_data(self):
        pidfile = os.path.join(self.tmp, "hung.pid")
        p = self.suite("--reps", "1", "--run-timeout-s", "600", background=True, env={
            "SPECPROF_SUITE_DRY_HANG": "hf:torchprof", "SPECPROF_SUITE_DRY_PIDFILE": pidfile})
        deadline = time.time() + 60
        while not os.path.exists(pidfile) and time.time() < deadline:
            time.sleep(0.05)
        self.assertTrue(os.path.exists(pidfile), "the hung run never started")
        rows_before = self.rows()
        self.assertGreaterEqual(len(rows_before), 3)     # calibrations + runs before the hang
        self.assertIn("partial results", self.table())   # rewritten after every run
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("interrupted", self.table())
        with open(pidfile) as f:
            pid = int(f.read().split()[0])
        time.sleep(0.2)
        self.assertFalse(os.path.exists("/proc/%d" % pid) and _state(pid) != "Z")


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        return st[st.rindex(")") + 2:].split()[0]
    except OSError:
        return "gone"


class TestTPRender(unittest.TestCase):
    def test_render_recorded_run(self):
        """tp_run.render turns the recorded two-rank H200 run (session 4) into its report: the
        cost table, the references and per-rank collective rows with the arrival clock."""
        import json
        import tp_run
        with open(os.path.join(HERE, "results/2026-11-29-s4/tp2/tp.json")) as f:
            res = json.load(f)
        md = tp_run.render(res)
        self.assertIn("## Throughput, with and without specprof", md)
        self.assertIn("| on | 2230.7 | 2109.9 | 5.42% | True |", md)
        self.assertIn("| compared on |", md)
        self.assertIn("| spec.draft | AllReduce | bfloat16 | 8192 | RING/LL |", md)
        self.assertEqual(md.count("## specprof, "), 4)


class TestReport(unittest.TestCase):
    def test_parse_report_and_metrics(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "report.json")
            rep = {"loss": {"ringbuf_full": 2, "decode_errors": 1}, "events": 5,
                   "processes": [{"pid": 7, "problems": ["x"], "threads": [
                       {"tid": 7, "cycles": 200, "cycle_ns": 400_000_000, "gpu": True, "phases": [
                           {"phase": "spec.verify", "cycles": 200, "cpu_span_ns": 20_000_000,
                            "sync_wait_ns": 0, "launches": 400, "gpu_cycles": 100,
                            "gpu_span_ns": 100_000_000, "gpu_busy_ns": 90_000_000,
                            "gpu_kernel_ns": 95_000_000},
                           {"phase": "spec.accept", "cycles": 0}]}]}]}
            with open(path, "w") as f:
                json.dump(rep, f)
            r = suite.parse_report(path)
        self.assertEqual(r["cycles"], 200)
        self.assertEqual(r["loss_total"], 3)
        self.assertAlmostEqual(r["cycle_ms"], 2.0)
        v = r["phases"]["spec.verify"]
        self.assertAlmostEqual(v["cpu_span"], 0.1)
        self.assertAlmostEqual(v["gpu_span"], 1.0)   # per GPU-known cycle
        self.assertAlmostEqual(v["gpu_busy"], 0.9)
        self.assertEqual(suite.phase_metrics("ebpf", None, r)["spec.verify"].keys(),
                         {"cpu_span", "sync_wait", "n"})
        self.assertIn("gpu_span", suite.phase_metrics("full", None, r)["spec.verify"])
        self.assertNotIn("spec.accept", suite.phase_metrics("full", None, r))
        self.assertIsNone(suite.parse_report(os.path.join(tempfile.gettempdir(), "nope", "report.json")))
        res = {"phases": {"spec.draft": {"n": 3, "mean_ms": 0.25}}}
        self.assertEqual(suite.phase_metrics("v3", res, None), {"spec.draft": {"wall_sync": 0.25, "n": 3}})
        self.assertEqual(suite.phase_metrics("cudaev", res, None)["spec.draft"]["gpu_elapsed"], 0.25)
        res = {"profiler": {"phases": {"spec.draft": {"n": 3, "n_gpu": 3, "gpu_span_ms": 1.0,
                                                      "gpu_busy_ms": 0.5, "gpu_kernel_ms": 0.6}}}}
        self.assertEqual(suite.phase_metrics("torchprof", res, None)["spec.draft"]["gpu_busy"], 0.5)

    def test_phase_table_shows_sampled_methods(self):
        """A sampled method's GPU figures (from its windows) are in the per-phase table, not only (c)'s."""
        def row(method, phases):
            return {"method": method, "status": "ok", "tok_s": "1", "phases_json": json.dumps(phases)}
        L = "\n".join(suite.phase_table([
            row("cudaev", {"spec.verify": {"gpu_elapsed": 2.0, "n": 10}}),
            row("probecycles", {"spec.verify": {"gpu_active": 2.01, "gpu_elapsed_sp": 2.02, "cpu_span": 3.0,
                                                "gpu_busy": 1.9, "n": 12}}),
            row("none", {})]))
        got = [x for x in L.split("\n") if x.startswith("| " + suite.LABEL["probecycles"])]
        self.assertEqual([x.split(" | ")[1] for x in got], ["gpu active", "gpu elapsed", "cpu span"], L)
        self.assertIn("2.010 (+0.5 %, +10 µs)", got[0])


# ------------------------------------------------------------------ a tiny fake torch

class _Capture:
    tape = None   # list of closures while a CUDA graph is being captured


def _vals(x):
    if isinstance(x, FakeTensor):
        return x.vals()
    return [x]


def _bcast(a, b):
    va, vb = _vals(a), _vals(b)
    n = max(len(va), len(vb))
    if len(va) == 1:
        va = va * n
    if len(vb) == 1:
        vb = vb * n
    assert len(va) == len(vb), (len(va), len(vb))
    return va, vb


class FakeTensor:
    """1-D (or 0-d) integer tensor over a shared list: slices are views, like torch's."""

    def __init__(self, base, off=0, n=None, scalar=False):
        self.base = base
        self.off = off
        self.n = len(base) - off if n is None else n
        self.scalar = scalar

    def vals(self):
        return self.base[self.off:self.off + self.n]

    def _set(self, values):
        assert len(values) == self.n, (len(values), self.n)
        self.base[self.off:self.off + self.n] = values

    def __len__(self):
        return self.n

    def __getitem__(self, s):
        assert isinstance(s, slice) and s.step in (None, 1), s
        start, stop, _ = s.indices(self.n)
        return FakeTensor(self.base, self.off + start, max(0, stop - start))

    def _op(self, fn, out_n, *srcs):
        """Runs fn() -> values into a new tensor now, or records it while capturing a graph."""
        out = FakeTensor([0] * out_n)
        if _Capture.tape is not None:
            _Capture.tape.append(lambda: out._set(fn()))
        else:
            out._set(fn())
        return out

    def _inplace(self, fn):
        if _Capture.tape is not None:
            _Capture.tape.append(lambda: self._set(fn()))
        else:
            self._set(fn())
        return self

    def copy_(self, src):
        return self._inplace(lambda: _bcast(self, src)[1] if self.n > 1 else _vals(src)[-1:])

    def fill_(self, v):
        return self._inplace(lambda: [v] * self.n)

    def zero_(self):
        return self.fill_(0)

    def add_(self, o):
        return self._inplace(lambda: [x + y for x, y in zip(*_bcast(self, o))])

    def __add__(self, o):
        n = max(self.n, len(_vals(o)))
        t = self._op(lambda: [x + y for x, y in zip(*_bcast(self, o))], n)
        t.scalar = self.scalar and not isinstance(o, FakeTensor)
        return t

    def __eq__(self, o):
        n = max(self.n, len(_vals(o)))
        return self._op(lambda: [int(x == y) for x, y in zip(*_bcast(self, o))], n)

    __hash__ = None

    def to(self, dtype):
        return self._op(lambda: list(self.vals()), self.n)

    def sum(self):
        t = self._op(lambda: [sum(self.vals())], 1)
        t.scalar = True
        return t

    def view(self, *shape):
        assert shape in ((1,), (-1,)), shape
        return FakeTensor(self.base, self.off, self.n)

    def gather(self, dim, index):
        return self._op(lambda: [self.vals()[i] for i in index.vals()], index.n)

    def tolist(self):
        assert _Capture.tape is None, "host read inside a captured graph"
        v = self.vals()
        return v[0] if self.scalar else list(v)

    def item(self):
        return self.vals()[0]


def _make_fake_torch():
    torch = types.ModuleType("torch")
    torch.long = torch.int64 = "int64"
    torch.bfloat16 = "bf16"
    torch.__version__ = "0.fake"
    torch.zeros = lambda n, dtype=None, device=None: FakeTensor([0] * n)
    torch.arange = lambda n, dtype=None, device=None: FakeTensor(list(range(n)))

    def add(a, b, out=None):
        if out is None:
            return a + b
        return out._inplace(lambda: [x + y for x, y in zip(*_bcast(a, b))])

    def cumprod(x, dim=0):
        def f():
            acc, res = 1, []
            for v in x.vals():
                acc *= v
                res.append(acc)
            return res
        return x._op(f, x.n)

    def cat(ts):
        ts = list(ts)
        return ts[0]._op(lambda: [v for t in ts for v in t.vals()], sum(t.n for t in ts))

    torch.add, torch.cumprod, torch.cat = add, cumprod, cat

    class Null:
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *e):
            return False

    torch.inference_mode = torch.no_grad = Null

    class Module:
        def __init__(self, *a, **k):
            pass

    nn = types.ModuleType("torch.nn")
    nn.Module = Module
    nn.functional = types.ModuleType("torch.nn.functional")
    torch.nn = nn

    cuda = types.ModuleType("torch.cuda")
    cuda.syncs = 0

    def synchronize():
        cuda.syncs += 1

    class Stream:
        def wait_stream(self, other):
            pass

    class CUDAGraph:
        def __init__(self):
            self.tape = None

        def replay(self):
            for op in self.tape:
                op()

    class graph:
        def __init__(self, g):
            self.g = g

        def __enter__(self):
            assert _Capture.tape is None
            _Capture.tape = []

        def __exit__(self, *e):
            self.g.tape, _Capture.tape = _Capture.tape, None
            return False

    class Event:
        clock = [0.0]

        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            Event.clock[0] += 1.0
            self.t = Event.clock[0]

        def elapsed_time(self, other):
            return other.t - self.t

    cuda.synchronize = synchronize
    cuda.Stream = Stream
    cuda.stream = lambda s: Null()
    cuda.current_stream = lambda: Stream()
    cuda.CUDAGraph = CUDAGraph
    cuda.graph = graph
    cuda.Event = Event
    torch.cuda = cuda

    profiler = types.ModuleType("torch.profiler")
    profiler.ranges = []

    class record_function:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            profiler.ranges.append(("enter", self.name))

        def __exit__(self, *e):
            profiler.ranges.append(("exit", self.name))

    profiler.record_function = record_function
    torch.profiler = profiler
    return torch


class FakeModel:
    """greedy(ids, pos) -> next tokens; draft and target agree unless `disagree(tok, pos)`."""

    def __init__(self, vocab, disagree=None):
        self.vocab = vocab
        self.disagree = disagree
        self.calls = 0

    def next_token(self, t, p):
        y = (t * 7919 + p * 104729 + 13) % self.vocab
        if self.disagree is not None and self.disagree(t, p):
            y = (y + 1) % self.vocab
        return y

    def greedy(self, ids, pos):
        self.calls += 1

        def f():
            i, p = _bcast(ids, pos)
            return [self.next_token(t, q) for t, q in zip(i, p)]
        return ids._op(f, max(ids.n, pos.n))


class FakeTorchTest(unittest.TestCase):
    def setUp(self):
        self.saved = {k: sys.modules.get(k) for k in
                      ("torch", "torch.nn", "torch.nn.functional", "torch.cuda", "torch.profiler",
                       "transformers")}
        self.saved_path = list(sys.path)
        self.torch = _make_fake_torch()
        sys.modules["torch"] = self.torch
        sys.modules["torch.nn"] = self.torch.nn
        sys.modules["torch.nn.functional"] = self.torch.nn.functional
        sys.modules["torch.cuda"] = self.torch.cuda
        sys.modules["torch.profiler"] = self.torch.profiler
        for k in list(sys.modules):
            if k == "sglang" or k.startswith("sglang.") or k in ("spec_loop", "speclm", "hf_assisted"):
                del sys.modules[k]
        # bench/gpu first: its sglang package, not testdata's or an installed one.
        sys.path.insert(0, HERE)

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        for k in list(sys.modules):
            if k == "sglang" or k.startswith("sglang.") or k in ("spec_loop", "speclm", "hf_assisted"):
                del sys.modules[k]
        sys.path[:] = self.saved_path


class TestEagleWorker(FakeTorchTest):
    def run_worker(self, graphs, timing="none", cycles=300, steps=4, agree=0.7):
        from sglang.srt.speculative import eagle_worker
        self.assertTrue(eagle_worker.__file__.startswith(os.path.join(HERE, "sglang", "srt", "speculative")))
        vocab = 50021
        draft = FakeModel(vocab)
        thr = int(agree * 1000)
        target = FakeModel(vocab, disagree=lambda t, p: (t * 31 + p * 17) % 1000 >= thr)
        ph = benchphase.Phases(timing, self.torch)
        w = eagle_worker.EAGLEWorker(draft, target, steps, ph, first_token=1)
        if graphs:
            w.init_cuda_graphs()
        w.reset()
        for _ in range(cycles):
            n = w.forward_batch_generation()
            self.assertTrue(1 <= n <= steps + 1)
        # The tokens must be the target's own greedy sequence from token 1 at position 0.
        want, t = [], 1
        for p in range(len(w.output_ids)):
            t = target.next_token(t, p)
            want.append(t)
        self.assertEqual(w.output_ids, want)
        self.assertEqual(sum(w.accept_lengths), len(w.output_ids))
        return w, draft, target, ph

    def test_eager_and_graphs_emit_the_target_greedy_sequence(self):
        w1, d1, t1, _ = self.run_worker(graphs=False)
        w2, d2, t2, _ = self.run_worker(graphs=True)
        self.assertEqual(w1.output_ids, w2.output_ids)
        mean = len(w1.output_ids) / len(w1.accept_lengths)
        self.assertTrue(2.0 < mean < 3.6, mean)   # 1 + p + ... + p^4 = 2.77 at p = 0.7
        # Graphs: the models' Python code ran only while capturing (3 warm-ups + capture).
        self.assertEqual(d2.calls, 4 * 4 + 4 * 1)   # draft: 4 steps per draft_forward; extend: 1
        self.assertEqual(t2.calls, 4)
        self.assertGreater(d1.calls, 300 * 4)

    def test_timing_modes(self):
        _, _, _, ph = self.run_worker(graphs=True, timing="v3", cycles=50)
        s = ph.summary()
        self.assertEqual(set(s), {"spec.draft", "spec.verify", "spec.accept", "spec.draft_extend"})
        self.assertTrue(all(v["n"] == 50 for v in s.values()))
        self.assertEqual(self.torch.cuda.syncs, 2 * 4 * 50)
        _, _, _, ph = self.run_worker(graphs=False, timing="cuda-events", cycles=20)
        s = ph.summary()
        self.assertTrue(all(v["n"] == 20 and v["mean_ms"] > 0 for v in s.values()), s)
        _, _, _, ph = self.run_worker(graphs=False, timing="torch-profiler", cycles=5)
        self.assertEqual(len(self.torch.profiler.ranges), 2 * 4 * 5)
        _, _, _, ph = self.run_worker(graphs=False, timing="v4", cycles=5)
        self.assertEqual(ph.summary()["spec.draft"]["n"], 5)

    def test_agreement_extremes(self):
        w, _, _, _ = self.run_worker(graphs=True, agree=1.0, cycles=20)
        self.assertEqual(w.accept_lengths, [5] * 20)
        w, _, _, _ = self.run_worker(graphs=True, agree=0.0, cycles=20)
        self.assertEqual(w.accept_lengths, [1] * 20)


class TestWorkloadScripts(FakeTorchTest):
    def test_import_and_flags(self):
        import spec_loop   # module level: torch classes, argparse setup in main()
        self.assertTrue(hasattr(spec_loop, "run_sglang"))
        import hf_assisted
        a = hf_assisted.parse_args([])
        self.assertEqual((a.timing, a.prompts, a.new_tokens, a.assist_tokens), ("none", 4, 64, 4))
        self.assertEqual(hf_assisted.parse_args(["--v3"]).timing, "v3")
        self.assertEqual(hf_assisted.parse_args(["--cuda-events"]).timing, "cuda-events")
        self.assertEqual(hf_assisted.parse_args(["--timing", "torch-profiler"]).timing, "torch-profiler")
        self.assertEqual((a.warmup_passes, a.repeat_s), (2, 0.0))   # steady state by default (§17c)
        import contextlib
        import io
        with contextlib.redirect_stderr(io.StringIO()):
            for bad in (["--warmup-passes", "-1"], ["--repeat-s", "-2"]):
                with self.assertRaises(SystemExit):
                    hf_assisted.parse_args(bad)
        for mode in suite.TIMING.values():
            self.assertIn(mode, benchphase.MODES)
        # The suite's workload commands parse with the real scripts' parsers.
        args = suite.parse_args(["--specprof", "/x"])
        for w in suite.WORKLOADS:
            for m in suite.METHODS:
                cmd = suite.workload_cmd(args, w, suite.TIMING[m], "/tmp/r.json", 0.5)
                if w == "hf":
                    hf_assisted.parse_args(cmd[2:])
                else:
                    self.assertEqual(cmd[1], os.path.join(ROOT, "bench/gpu/spec_loop.py"))
            cal = suite.workload_cmd(args, w, "none", "/tmp/r.json", None, calibrate=True)
            self.assertIn("--calibrate-only", cal)
        import speclm
        self.assertTrue(hasattr(speclm, "build_pair"))

    def test_spec_loop_help_and_flags(self):
        env = dict(os.environ)
        fake = os.path.join(tempfile.mkdtemp(prefix="faketorch-"), "torch")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write("class _M:\n    Module = object\nnn = _M\n")
        env["PYTHONPATH"] = os.path.dirname(fake)
        r = subprocess.run([sys.executable, os.path.join(HERE, "spec_loop.py"), "--help"],
                           env=env, capture_output=True, text=True, timeout=60)
        subprocess.call(["rm", "-rf", os.path.dirname(fake)])
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in ("--worker", "--timing", "--noise-scale", "--calibrate-only", "--result"):
            self.assertIn(flag, r.stdout)


class TestBenchphase(unittest.TestCase):
    def test_trace_aggregation(self):
        ev = [
            {"ph": "X", "cat": "user_annotation", "name": "spec.draft", "ts": 100, "dur": 50},
            {"ph": "X", "cat": "user_annotation", "name": "spec.verify", "ts": 200, "dur": 50},
            {"ph": "X", "cat": "user_annotation", "name": "spec.draft", "ts": 300, "dur": 50},
            {"ph": "X", "cat": "user_annotation", "name": "other", "ts": 400, "dur": 50},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 5, "args": {"correlation": 1}},
            {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "ts": 120, "dur": 5, "args": {"correlation": 2}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 210, "dur": 5, "args": {"correlation": 3}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 260, "dur": 5, "args": {"correlation": 4}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 410, "dur": 5, "args": {"correlation": 5}},
            {"ph": "X", "cat": "kernel", "name": "k1", "ts": 130, "dur": 10, "args": {"correlation": 1}},
            {"ph": "X", "cat": "kernel", "name": "k2", "ts": 135, "dur": 20, "args": {"correlation": 2}},
            {"ph": "X", "cat": "kernel", "name": "g1", "ts": 220, "dur": 10, "args": {"correlation": 3}},
            {"ph": "X", "cat": "kernel", "name": "g2", "ts": 240, "dur": 10, "args": {"correlation": 3}},
            {"ph": "X", "cat": "kernel", "name": "outside", "ts": 270, "dur": 10, "args": {"correlation": 4}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "m", "ts": 420, "dur": 10, "args": {"correlation": 5}},
            {"ph": "X", "cat": "kernel", "name": "nolaunch", "ts": 500, "dur": 10, "args": {"correlation": 99}},
            {"ph": "i", "cat": "kernel", "name": "instant"},
        ]
        r = benchphase.aggregate_chrome_trace({"traceEvents": ev}, {"spec.draft", "spec.verify"})
        d, v = r["phases"]["spec.draft"], r["phases"]["spec.verify"]
        self.assertEqual((d["n"], d["n_gpu"]), (2, 1))
        self.assertAlmostEqual(d["gpu_kernel_ms"], 0.030)
        self.assertAlmostEqual(d["gpu_span_ms"], 0.025)
        self.assertAlmostEqual(d["gpu_busy_ms"], 0.025)
        self.assertAlmostEqual(v["gpu_span_ms"], 0.030)
        self.assertAlmostEqual(v["gpu_busy_ms"], 0.020)
        self.assertEqual(r["unjoined"], 1)
        self.assertEqual(r["outside_ranges"], 2)   # launched at 260 (no range) and in "other"
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(ev, f)
        try:
            self.assertEqual(benchphase.aggregate_chrome_trace(f.name, {"spec.draft"})["phases"]["spec.draft"]["n"], 2)
        finally:
            os.remove(f.name)

    def test_calibrate_and_hash(self):
        s, p = benchphase.calibrate_scale(lambda x: 1.0 / (1.0 + 10 * x), 0.7)
        self.assertAlmostEqual(p, 0.7, delta=0.01)
        s, p = benchphase.calibrate_scale(lambda x: 1.0 / (1.0 + 0.01 * x), 0.7)   # needs hi > 1
        self.assertAlmostEqual(p, 0.7, delta=0.05)
        self.assertEqual(benchphase.token_hash([1, 2, 3]), benchphase.token_hash((1, 2, 3)))
        self.assertNotEqual(benchphase.token_hash([1, 2, 3]), benchphase.token_hash([1, 2, 4]))
        ph = benchphase.Phases("none")
        with ph.span("x"):
            pass
        self.assertEqual(ph.summary(), {})
        with self.assertRaises(ValueError):
            benchphase.Phases("bogus")


FAKE_AB_WORKLOAD = textwrap.dedent(r"""
    #!/usr/bin/env python3
    # Fake hf_assisted.py --repeat-s: 3 prompts in turn, each generate 60/90/120 ms, 25 % slower
    # while the fake specprof's marker file exists; the 5th generate of prompt 1 may give other tokens.
    import argparse, json, os, time
    p = argparse.ArgumentParser()
    p.add_argument("--repeat-s", type=float); p.add_argument("--ready-file"); p.add_argument("--result")
    p.add_argument("--bad", action="store_true")
    a = p.parse_args()
    with open(a.ready_file, "w") as f:
        f.write("%d\n" % os.getpid())
    recs, i, end = [], 0, time.time() + a.repeat_s
    while time.time() < end:
        pr = i % 3
        t0 = time.time()
        d = (0.06, 0.09, 0.12)[pr] * (1.25 if os.path.exists(os.environ["FAKE_AB_MARK"]) else 1.0)
        time.sleep(d)
        recs.append({"prompt": pr, "t0": t0, "t1": time.time(), "tokens": 48, "cycles": 17,
                     "same": not (a.bad and pr == 1 and i // 3 == 4)})
        i += 1
    ok = all(r["same"] for r in recs)
    with open(a.result, "w") as f:
        json.dump({"ok": ok, "repeats": recs, "accept_len": 2.8, "versions": {"torch": "fake"},
                   "error": None if ok else "other tokens"}, f)
""").lstrip()

FAKE_AB_SPECPROF = textwrap.dedent(r"""
    #!/usr/bin/env python3
    # Fake `specprof attach`: 0.3 s to "attach", then the marker file for --duration, then 0.2 s.
    import datetime, os, sys, time
    args = sys.argv[1:]
    assert args[0] == "attach" and "--pid" in args and "-o" in args, args
    assert args[args.index("--cupti") + 1] == "off" and args[args.index("--preset") + 1] == "hf-assisted", args
    dur = float(args[args.index("--duration") + 1].rstrip("s"))
    t0 = time.time()
    time.sleep(0.3)
    open(os.environ["FAKE_AB_MARK"], "w").close()
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (now.microsecond // 1000)
    sys.stderr.write('time=%s level=INFO msg="probes attached" pid=1 library=libcuda.so.1 symbols=30\n' % stamp)
    sys.stderr.flush()
    time.sleep(max(0.0, t0 + dur - time.time()))
    os.remove(os.environ["FAKE_AB_MARK"])
    time.sleep(0.2)
""").lstrip()


class TestABAttach(unittest.TestCase):
    """bench/gpu/abattach.py: attach/detach in turn around one process, each generate sorted."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="abattach-")
        self.wl = os.path.join(self.tmp, "wl.py")
        self.sp = os.path.join(self.tmp, "specprof")
        for path, text in ((self.wl, FAKE_AB_WORKLOAD), (self.sp, FAKE_AB_SPECPROF)):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.env = dict(os.environ, FAKE_AB_MARK=os.path.join(self.tmp, "mark"))
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def ab(self, *extra):
        out = os.path.join(self.tmp, "out")
        r = subprocess.run([sys.executable, os.path.join(HERE, "abattach.py"), "--specprof", self.sp,
                            "--workload", self.wl, "--out", out, "--on-s", "1.5", "--off-s", "1",
                            "--total-s", "9", "--margin-s", "0.05"] + list(extra),
                           env=self.env, capture_output=True, text=True, timeout=120)
        return r, out

    def test_slowdown_found(self):
        r, out = self.ab()
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        with open(os.path.join(out, "ab.json")) as f:
            ab = json.load(f)
        s = ab["summary"]
        self.assertGreaterEqual(s["windows"], 2)
        self.assertEqual(s["windows_failed"], 0)
        self.assertGreater(s["on"], 10)
        self.assertGreater(s["off"], 10)
        self.assertGreater(s["left_out"], 0)   # the fake attach's first 0.3 s and last 0.2 s
        # The fake slows each generate by 25 % while "attached"; sleep overshoot blurs it a little.
        self.assertAlmostEqual(s["slowdown_median"], 0.25, delta=0.08)
        self.assertEqual(len(ab["per_window"]), s["windows"])
        with open(os.path.join(out, "table.md")) as f:
            table = f.read()
        self.assertIn("every one with the measured loop's tokens: yes", table)

    def test_attach_cmd(self):
        """--attach-cmd replaces `specprof attach` (e.g. bench/gpu/emptyprobe), {pid} and {duration} filled."""
        r, out = self.ab("--attach-cmd", self.sp + " attach --pid {pid} --duration {duration} -o {out} "
                         "--cupti off --preset hf-assisted")
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        with open(os.path.join(out, "ab.json")) as f:
            s = json.load(f)["summary"]
        self.assertAlmostEqual(s["slowdown_median"], 0.25, delta=0.08)
        with open(os.path.join(out, "table.md")) as f:
            self.assertIn("attach --pid PID --duration 1.5s -o DIR", f.read())

    def test_other_tokens_fail(self):
        r, out = self.ab("--", "--bad")
        self.assertNotEqual(r.returncode, 0)
        with open(os.path.join(out, "table.md")) as f:
            self.assertIn("measured loop's tokens: NO", f.read())

    def test_classify(self):
        import abattach
        w = [{"rc": 0, "spawn": 10.0, "attached": 11.0, "until": 20.0, "exit": 21.0},
             {"rc": 1, "spawn": 30.0, "attached": 31.0, "until": 40.0, "exit": 41.0}]
        reps = [{"t0": 1, "t1": 2}, {"t0": 11.5, "t1": 13}, {"t0": 10.5, "t1": 12}, {"t0": 19, "t1": 20.5},
                {"t0": 25, "t1": 26}, {"t0": 21.2, "t1": 22}, {"t0": 32, "t1": 33}, {"t0": 50, "t1": 51}]
        self.assertEqual(abattach.classify(reps, w, 0.5),
                         [("off", 0), ("on", 0), (None, None), (None, None), ("off", 1), (None, None),
                          (None, None), ("off", 2)])
        self.assertAlmostEqual(abattach.parse_log_time("2026-11-30T09:44:44.357Z"), 1796031884.357, places=3)
        self.assertAlmostEqual(abattach.parse_log_time("2026-11-30T10:44:44.357+01:00"), 1796031884.357, places=3)
        self.assertIsNone(abattach.attached_at("time=2026-11-30T09:44:44.357Z level=INFO msg=\"other\"\n"))


class TestProbeWin(unittest.TestCase):
    """bench/gpu/probewin.py: one attach's generates split by its probe windows."""

    def test_split(self):
        tmp = tempfile.mkdtemp(prefix="probewin-")
        self.addCleanup(shutil.rmtree, tmp, True)
        t0 = 1_800_000_000.0
        # Reference generates (no specprof) take 1.0 s; attached from t0+10 to t0+100; windows
        # [t0+20, t0+21.1] and [t0+40, t0+41.1]; generates overlapping them take 1.3 s, the others
        # between windows 1.05 s.
        reps = []
        for k in range(5):
            reps.append({"prompt": 0, "t0": t0 + k * 1.5, "t1": t0 + k * 1.5 + 1.0})
            reps.append({"prompt": 0, "t0": t0 + 110 + k * 1.5, "t1": t0 + 111 + k * 1.5})
        for start in (15.0, 20.5, 30.0, 40.2, 50.0, 70.0):
            d = 1.3 if start in (20.5, 40.2) else 1.05
            reps.append({"prompt": 0, "t0": t0 + start, "t1": t0 + start + d})
        ab = {"windows": [{"spawn": t0 + 9, "attached": t0 + 10, "until": t0 + 100, "exit": t0 + 101}],
              "repeats": reps}
        with open(os.path.join(tmp, "ab.json"), "w") as f:
            json.dump(ab, f)
        iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % round((t % 1) * 1000)
        lines = ['time=%s level=DEBUG msg="probe window closing" window=1' % iso(t0 + 11),
                 'time=%s level=DEBUG msg="probe window closed" window=1 removal=100ms' % iso(t0 + 11.1),
                 'time=%s level=DEBUG msg="probe window open" window=2 attach=5ms' % iso(t0 + 20.005),
                 'time=%s level=DEBUG msg="probe window closed" window=2 removal=100ms' % iso(t0 + 21.1),
                 'time=%s level=DEBUG msg="probe window open" window=3 attach=5ms' % iso(t0 + 40.005),
                 'time=%s level=DEBUG msg="probe window closed" window=3 removal=100ms' % iso(t0 + 41.1)]
        with open(os.path.join(tmp, "windows.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run([sys.executable, os.path.join(HERE, "probewin.py"), tmp, "--skip-s", "30"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| overlapping a probe window | 2 | +30.0 % | +30.0 % |", r.stdout)
        self.assertIn("| between windows | 4 | +5.0 % | +5.0 % |", r.stdout)
        self.assertIn("| between windows, in the attach's first 30 s | 2 | +5.0 % |", r.stdout)
        self.assertIn("| between windows, after the attach's first 30 s | 2 | +5.0 % |", r.stdout)
        self.assertIn("1 attaches, 3 probe windows", r.stdout)

    def test_drift_cancels(self):
        """Two attaches; the host slows by 20 % between them: each attach is compared with the
        generates on either side of it, so the drift does not show as a cost."""
        tmp = tempfile.mkdtemp(prefix="probewin-")
        self.addCleanup(shutil.rmtree, tmp, True)
        t0 = 1_800_000_000.0
        reps = []
        for k in range(4):
            reps.append({"prompt": 1, "t0": t0 + k * 1.5, "t1": t0 + k * 1.5 + 1.0})      # before attach 1
            reps.append({"prompt": 1, "t0": t0 + 100 + k * 2, "t1": t0 + 101.2 + k * 2})  # between the attaches
            reps.append({"prompt": 1, "t0": t0 + 200 + k * 2, "t1": t0 + 201.2 + k * 2})  # after attach 2
        reps.append({"prompt": 1, "t0": t0 + 50, "t1": t0 + 51.21})   # attach 1: +10 % against 1.1, the median of 1.0 and 1.2
        reps.append({"prompt": 1, "t0": t0 + 150, "t1": t0 + 151.32})  # attach 2: +10 % against 1.2
        ab = {"windows": [{"spawn": t0 + 9, "attached": t0 + 10, "until": t0 + 90, "exit": t0 + 91, "rc": 0},
                          {"spawn": t0 + 109, "attached": t0 + 110, "until": t0 + 190, "exit": t0 + 191, "rc": 0}],
              "repeats": reps}
        with open(os.path.join(tmp, "ab.json"), "w") as f:
            json.dump(ab, f)
        iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % round((t % 1) * 1000)
        with open(os.path.join(tmp, "windows.txt"), "w") as f:
            f.write('time=%s level=DEBUG msg="probe window closed" window=1 removal=100ms\n' % iso(t0 + 11))
            f.write('time=%s level=DEBUG msg="probe window closed" window=1 removal=100ms\n' % iso(t0 + 111))
        r = subprocess.run([sys.executable, os.path.join(HERE, "probewin.py"), tmp, "--skip-s", "0"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| between windows | 2 | +10.0 % | +10.0 % |", r.stdout)
        self.assertIn("2 attaches, 2 probe windows", r.stdout)


if __name__ == "__main__":
    unittest.main()
