"""Mirrors sglang/srt/managers/scheduler.py: the scheduler process's event loop (spec v1 turns the
overlap scheduler off, so `event_loop_normal`), which runs every forward on the main thread."""

import os
import sys
import time

from fakecuda import tag
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.scheduler_metrics_mixin import SchedulerMetricsMixin
from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.speculative.eagle_worker import EAGLEWorker


class Scheduler(SchedulerOutputProcessorMixin, SchedulerMetricsMixin):
    def __init__(self, server_args, gpu, tp_group=None):
        self.server_args = server_args
        self.gpu = gpu
        self.tp_rank = server_args.tp_rank
        self.tp_worker = TpModelWorker(server_args, gpu, server_args.num_hidden_layers,
                                       tp_group=tp_group)
        self.draft_worker = EAGLEWorker(server_args, gpu, target_worker=self.tp_worker)
        self.model_worker = self.draft_worker
        self.running_batch = ScheduleBatch.init_new(server_args.batch_size, server_args.prompt_len)
        self.cur_batch = None
        self.last_batch = None
        self.init_metrics()

    def event_loop_normal(self):
        """A normal scheduler loop (stops after server_args.num_cycles decode steps)."""
        with tag("sched.loop"):
            while True:
                recv_reqs = self.recv_requests()
                self.process_input_requests(recv_reqs)
                batch = self.get_next_batch_to_run()
                self.cur_batch = batch
                if batch is None:
                    break
                result = self.run_batch(batch)
                self.process_batch_result(batch, result)
                self.last_batch = batch

    def recv_requests(self):
        with tag("sched.recv"):
            # Where the real scheduler waits for requests: the test hook's pause
            # (--pause-at-cycle, fault-injection tests) waits here too.
            a = self.server_args
            if a.pause_file and self.forward_ct_decode == a.pause_at_cycle and not getattr(self, "_paused", False):
                self._paused = True
                sys.stderr.write("sglang_demo: paused at cycle %d, pid %d, waiting for %s\n"
                                 % (self.forward_ct_decode, os.getpid(), a.pause_file))
                sys.stderr.flush()
                while not os.path.exists(a.pause_file):
                    time.sleep(0.01)
            return []

    def process_input_requests(self, recv_reqs):
        with tag("sched.recv"):
            for _ in recv_reqs:
                pass

    def get_next_batch_to_run(self):
        with tag("sched.batch"):
            if self.forward_ct_decode >= self.server_args.num_cycles:
                return None
            return self.update_running_batch(self.running_batch)

    def update_running_batch(self, batch):
        with tag("sched.batch"):
            batch.prepare_for_decode()
            return batch

    def run_batch(self, batch):
        with tag("sched.run_other"):
            # Tensors run_batch builds around the forward: one small kernel from this frame.
            self.gpu.launch("write_req_to_token_pool", batch.batch_size())
            return self.model_worker.forward_batch_generation(batch)

    def process_batch_result(self, batch, result):
        with tag("sched.result"):
            return self.process_batch_result_decode(batch, result)


def run_scheduler_process(server_args, gpu, tp_group=None, on_ready=None):
    """Builds the scheduler (models, CUDA graphs), then runs its event loop."""
    scheduler = Scheduler(server_args, gpu, tp_group)
    if on_ready is not None:
        on_ready(scheduler)
    scheduler.last_decode_stats_tic = time.perf_counter()
    scheduler.event_loop_normal()
    return scheduler
