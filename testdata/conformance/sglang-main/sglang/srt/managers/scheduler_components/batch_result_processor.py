"""Mirrors sglang/srt/managers/scheduler_components/batch_result_processor.py (main):
process_batch_result_decode / _prefill begin with result.copy_done.synchronize(), the blocking
wait for the copies that run_batch started one loop iteration earlier (so for the previous
cycle), then read the host tensors (.tolist() on CPU tensors: no CUDA call)."""

from oracle import ph


class SchedulerBatchResultProcessor(object):
    def __init__(self, scheduler):
        self.scheduler = scheduler

    def process_batch_result_prefill(self, batch, result):
        with ph("sched.result"):
            self._wait_copy(result)

    def process_batch_result_decode(self, batch, result):
        with ph("sched.result"):
            self._wait_copy(result)
            self.scheduler.forward_ct_decode += 1

    def _wait_copy(self, result):
        if result.copy_done is not None:
            # The wait is for the cycle whose copies were recorded on copy_done.
            with ph("sched.result", result.cycle):
                result.copy_done.synchronize()
