#!/usr/bin/env python3
"""CPU-bound phases for specprof's CPU sampler tests and overhead benchmark (agent/sampler_test.go).

`Worker.step` is one cycle (rules: cpu_phases.yaml). It calls `Worker.draft` then
`Worker.verify`; each launches one kernel on libcuda (the stand-in through LD_LIBRARY_PATH),
so that specprof sees the cycle, then burns a given amount of the thread's own CPU time
(time.thread_time_ns, so that time spent waiting for the GIL or the CPU does not count) in
`spin_draft` / `spin_verify`. The CPU time each phase really used is reported, to compare with
what the sampler measured.

After loading libcuda it prints {"ready": true, "pid": P, "tid": T} and reads commands from stdin,
one per line (or runs the one command given as its arguments, then exits), answering each with one
JSON line:

  run CYCLES DRAFT_MS VERIFY_MS BG  CYCLES cycles; with BG=1 a second thread spins in
                                    spin_background meanwhile. Prints {"draft_ns", "verify_ns",
                                    "bg_ns", "bg_tid"}: thread CPU time spent in each.
  bench ITERS DEPTH                 run a pure-Python loop of ITERS iterations DEPTH frames deep;
                                    prints {"ns": wall ns}
  quit
"""

import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.setrecursionlimit(10000)

import fakecuda  # noqa: E402

SPIN_CHUNK = 200  # loop iterations between clock reads


def lcg(x, n):
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def spin_draft(budget_ns):
    end = time.thread_time_ns() + budget_ns
    x = 1
    while time.thread_time_ns() < end:
        for _ in range(SPIN_CHUNK):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def spin_verify(budget_ns):
    end = time.thread_time_ns() + budget_ns
    x = 2
    while time.thread_time_ns() < end:
        for _ in range(SPIN_CHUNK):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


def spin_background(stop):
    x = 3
    while not stop.is_set():
        for _ in range(SPIN_CHUNK):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


class Worker(object):
    def __init__(self, cu):
        self.cu = cu
        self.fn = cu.function("cpu_phase_kernel", duration_us=1)
        self.stream = cu.stream()
        self.draft_ns = 0
        self.verify_ns = 0

    def step(self, draft_ns, verify_ns):
        self.draft(draft_ns)
        self.verify(verify_ns)

    def draft(self, budget_ns):
        t0 = time.thread_time_ns()
        self.cu.launch(self.fn, self.stream)
        spin_draft(budget_ns)
        self.draft_ns += time.thread_time_ns() - t0

    def verify(self, budget_ns):
        t0 = time.thread_time_ns()
        self.cu.launch(self.fn, self.stream)
        spin_verify(budget_ns)
        self.verify_ns += time.thread_time_ns() - t0


def background(stop, out):
    out["tid"] = threading.get_native_id()
    t0 = time.thread_time_ns()
    spin_background(stop)
    out["ns"] = time.thread_time_ns() - t0


def nested(depth, iters):
    if depth > 0:
        return nested(depth - 1, iters)
    return lcg(1, iters)


def main():
    cu = fakecuda.Cuda()
    w = Worker(cu)
    print(json.dumps({"ready": True, "pid": os.getpid(), "tid": threading.get_native_id()}), flush=True)
    commands = [" ".join(sys.argv[1:])] if len(sys.argv) > 1 else sys.stdin
    for line in commands:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "run":
            cycles, draft_ms, verify_ms, bg = int(parts[1]), float(parts[2]), float(parts[3]), parts[4] == "1"
            w.draft_ns = w.verify_ns = 0
            stop, out = threading.Event(), {}
            th = None
            if bg:
                th = threading.Thread(target=background, args=(stop, out), name="cpu-background")
                th.start()
            for _ in range(cycles):
                w.step(int(draft_ms * 1e6), int(verify_ms * 1e6))
            cu.sync(w.stream)
            if th is not None:
                stop.set()
                th.join()
            print(json.dumps({"draft_ns": w.draft_ns, "verify_ns": w.verify_ns, "bg_ns": out.get("ns", 0),
                              "bg_tid": out.get("tid", 0)}), flush=True)
        elif parts[0] == "bench":
            iters, depth = int(parts[1]), int(parts[2])
            t0 = time.perf_counter_ns()
            nested(depth, iters)
            print(json.dumps({"ns": time.perf_counter_ns() - t0}), flush=True)


if __name__ == "__main__":
    main()
