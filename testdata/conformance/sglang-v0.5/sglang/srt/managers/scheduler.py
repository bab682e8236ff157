"""Mirrors sglang/srt/managers/scheduler.py of v0.5 with spec v1: the overlap scheduler is off for
EAGLE, so the process runs event_loop_normal and every forward on its main thread."""

from oracle import ph
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import GenerationBatchResult  # noqa: F401  (re-exported, as v0.5)
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.utils import DynamicGradMode


class Scheduler(SchedulerOutputProcessorMixin):
    def __init__(self, server_args, gpu):
        from sglang.srt.speculative.eagle_worker import EAGLEWorker
        self.server_args = server_args
        self.gpu = gpu
        self.tp_worker = TpModelWorker(server_args, gpu, server_args.num_hidden_layers)
        self.draft_worker = EAGLEWorker(server_args, gpu, target_worker=self.tp_worker)
        self.model_worker = self.draft_worker
        self.waiting_queue = [Req("req-%d" % i) for i in range(server_args.batch_size)]
        self.running_batch = None
        self.last_batch = None
        self.cur_batch = None
        self.forward_ct = 0
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.decode_log_lines = 0
        self.token_ids_dev = gpu.cuda.alloc(8 * server_args.batch_size)

    @DynamicGradMode()
    def event_loop_normal(self):
        """A normal scheduler loop (stops when no batch is left: server_args.num_cycles steps)."""
        with ph("sched.loop"):
            while True:
                recv_reqs = self.recv_requests()
                self.process_input_requests(recv_reqs)
                batch = self.get_next_batch_to_run()
                self.cur_batch = batch
                if batch:
                    result = self.run_batch(batch)
                    self.process_batch_result(batch, result)
                else:
                    self.self_check_during_idle()
                    break
                self.last_batch = batch

    def recv_requests(self):
        with ph("sched.recv"):
            return []

    def process_input_requests(self, recv_reqs):
        with ph("sched.recv"):
            for _ in recv_reqs:
                pass

    def get_next_batch_to_run(self):
        with ph("sched.batch"):
            if self.forward_ct >= self.server_args.num_cycles:
                return None
            if self.last_batch is not None and self.last_batch.forward_mode == ForwardMode.EXTEND:
                self.running_batch = self.last_batch
            new_batch = self.get_new_batch_prefill()
            if new_batch is not None:
                return new_batch
            return self.update_running_batch(self.running_batch)

    def get_new_batch_prefill(self):
        with ph("sched.batch"):
            if not self.waiting_queue:
                return None
            reqs, self.waiting_queue = self.waiting_queue, []
            new_batch = ScheduleBatch.init_new(reqs, self.gpu)
            new_batch.prepare_for_extend()
            return new_batch

    def update_running_batch(self, batch):
        with ph("sched.batch"):
            batch.prepare_for_decode()
            return batch

    def run_batch(self, batch):
        with ph("sched.run_other"):
            self.forward_ct += 1
            return self.model_worker.forward_batch_generation(batch)

    def process_batch_result(self, batch, result):
        with ph("sched.result"):
            if batch.forward_mode == ForwardMode.DECODE:
                self.process_batch_result_decode(batch, result)
            else:
                self.process_batch_result_prefill(batch, result)

    def self_check_during_idle(self):
        with ph("sched.loop"):
            return


def run_scheduler_process(server_args, gpu):
    scheduler = Scheduler(server_args, gpu)
    scheduler.event_loop_normal()
    return scheduler
