"""Launch-cost benchmark frames (see testdata/workloads/launch_bench.py): the launches run DEPTH
frames below EAGLEWorker.verify, so specprof's walk crosses DEPTH frames to find the phase."""

import time


def _nested(depth, fn, *args):
    if depth <= 0:
        return fn(*args)
    return _nested(depth - 1, fn, *args)


class EAGLEWorker:
    def __init__(self, launch, drain):
        self.launch = launch
        self.drain = drain

    def verify(self, depth, batches, per_batch):
        return _nested(depth, self._batches, batches, per_batch)

    def _batches(self, batches, per_batch):
        launch = self.launch
        out = []
        for _ in range(per_batch):  # warm-up: specprof classifies the code objects here
            launch()
        self.drain()
        for _ in range(batches):
            t0 = time.perf_counter_ns()
            for _ in range(per_batch):
                launch()
            t1 = time.perf_counter_ns()
            self.drain()
            out.append((t1 - t0) / per_batch)
        return out
