#!/usr/bin/env python3
"""GPU-bound phases timed with CUDA events, for specprof's GPU elapsed/active checks
(cmd/specprof/events_e2e_test.go).

`Worker.step` is one cycle (rules: event_phases.yaml): `draft`, `verify` and `extend` each launch a
few long kernels on one stream, so that the CPU runs ahead of the (simulated) GPU and each phase's
work queues behind the previous one's. Around each phase, `step` records a pair of timing events
on the stream, the way one measures a phase's GPU time by hand; the cycle ends with a stream
synchronisation, so every cycle's draft starts on an idle GPU. After the last cycle the events'
elapsed times (cuEventElapsedTime) are printed as one JSON line:

  {"events_ms": {"ev.draft": [per cycle], "ev.verify": [...], "ev.extend": [...]}, "pid": P}

Usage: event_phases.py CYCLES KERNEL_US
"""

import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fakecuda  # noqa: E402

PHASES = ("ev.draft", "ev.verify", "ev.extend")


class Worker(object):
    def __init__(self, cu, kernel_us):
        self.cu = cu
        self.stream = cu.stream()
        self.fns = {n: cu.function("ev_" + n, duration_us=kernel_us * f)
                    for n, f in (("draft", 1.0), ("verify", 1.5), ("extend", 0.5))}
        self.events = []  # per cycle: [(phase, start event, end event)]

    def step(self):
        cu, s = self.cu, self.stream
        marks = []
        for name, fn in zip(PHASES, (self.draft, self.verify, self.extend)):
            e0, e1 = cu.event(0), cu.event(0)
            cu.event_record(e0, s)
            fn()
            cu.event_record(e1, s)
            marks.append((name, e0, e1))
        self.events.append(marks)
        cu.sync(s)

    def draft(self):
        for _ in range(4):
            self.cu.launch(self.fns["draft"], self.stream)

    def verify(self):
        for _ in range(6):
            self.cu.launch(self.fns["verify"], self.stream)

    def extend(self):
        for _ in range(3):
            self.cu.launch(self.fns["extend"], self.stream)


def main():
    cycles, kernel_us = int(sys.argv[1]), float(sys.argv[2])
    cu = fakecuda.Cuda()
    w = Worker(cu, kernel_us)
    # Start-up, as a server loads its model before serving: the first cycle's GPU work is then
    # recorded with the profiler already listening.
    cu.launch(w.fns["draft"], w.stream)
    cu.sync(w.stream)
    time.sleep(0.5)
    for _ in range(cycles):
        w.step()
    out = {n: [] for n in PHASES}
    for marks in w.events:
        for name, e0, e1 in marks:
            out[name].append(cu.event_elapsed_ms(e0, e1))
    print(json.dumps({"events_ms": out, "pid": os.getpid()}), flush=True)


if __name__ == "__main__":
    main()
