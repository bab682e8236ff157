"""The engine: start-up, one warm-up step, then the step loop with a pure-Python scheduler tick."""

import time


class EngineCore(object):
    def __init__(self, worker, target, stream, tick_s):
        self.worker, self.tick_s = worker, tick_s
        target.init_weights(stream)

    def warmup(self):
        self.worker.execute_step()

    def run(self, steps):
        for _ in range(steps):
            self.step()

    def step(self):
        self.scheduler_tick()
        self.worker.execute_step()

    def scheduler_tick(self):
        if self.tick_s > 0:
            time.sleep(self.tick_s)
