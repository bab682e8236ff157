"""Mirrors sglang/srt/managers/scheduler.py (main, spec v2): event_loop_overlap. run_batch
launches batch k (the cycle function) and, after it returns, relays its outputs, waits for the
forward stream on the copy stream and starts the result copies (copy_to_cpu, copy_done.record());
the loop then processes batch k-1's result (pop_and_process -> copy_done.synchronize())."""

import collections
import functools

from oracle import ph
from sglang.srt.managers.overlap_utils import FutureMap, resolve_forward_inputs
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
from sglang.srt.managers.scheduler_components.request_receiver import SchedulerRequestReceiver
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import Event
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.utils import DynamicGradMode


def scheduler_nvtx_method(name):
    """An NVTX range around the method when enabled; a plain wrapper frame otherwise."""
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            return fn(self, *args, **kwargs)
        return wrapper
    return decorator


class Scheduler(object):
    def __init__(self, server_args, gpu):
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
        self.server_args = server_args
        self.gpu = gpu
        self.tp_worker = TpModelWorker(server_args, gpu, server_args.num_hidden_layers)
        self.draft_worker = EAGLEWorkerV2(server_args, gpu, target_worker=self.tp_worker)
        self.draft_worker.init_cuda_graphs()
        self.model_worker = self.draft_worker
        self.request_receiver = SchedulerRequestReceiver()
        self.batch_result_processor = SchedulerBatchResultProcessor(self)
        self.future_map = FutureMap(gpu)
        self.waiting_queue = [Req("req-%d" % i) for i in range(server_args.batch_size)]
        self.running_batch = None
        self.last_batch = None
        self.forward_ct = 0
        self.forward_ct_decode = 0
        self.forward_stream = gpu.stream
        self.schedule_stream = gpu.schedule_stream
        self.copy_stream = gpu.copy_stream
        self.host_buf = bytearray(8 * server_args.batch_size)
        self.dev_buf = gpu.cuda.alloc(8 * server_args.batch_size)
        self._wait_ev = gpu.cuda.event()

    def _wait_stream(self, waiter, waitee):
        # torch Stream.wait_stream: an event recorded on `waitee`, waited for on `waiter`
        self.gpu.cuda.event_record(self._wait_ev, waitee)
        self.gpu.cuda.stream_wait_event(waiter, self._wait_ev)

    @DynamicGradMode()
    def event_loop_overlap(self):
        with ph("sched.loop"):
            self.result_queue = collections.deque()

            def pop_and_process():
                tmp_batch, tmp_result = self.result_queue.popleft()
                self.process_batch_result(tmp_batch, tmp_result)

            while True:
                recv_reqs = self.request_receiver.recv_requests()
                self.process_input_requests(recv_reqs)
                batch = self.get_next_batch_to_run()
                if batch:
                    batch_result = self.run_batch(batch)
                    self._apply_war_barrier()
                    self.result_queue.append((batch, batch_result))
                if self.last_batch:
                    pop_and_process()
                elif batch is None:
                    break
                self.last_batch = batch

    def _apply_war_barrier(self):
        # schedule_stream.wait_stream(forward_stream) (the coarse WAR barrier)
        self._wait_stream(self.schedule_stream, self.forward_stream)

    @scheduler_nvtx_method("scheduler.process_input_requests")
    def process_input_requests(self, recv_reqs):
        with ph("sched.recv"):
            for _ in recv_reqs:
                pass

    @scheduler_nvtx_method("scheduler.get_next_batch_to_run")
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

    @scheduler_nvtx_method("scheduler.run_batch")
    def run_batch(self, batch):
        with ph("sched.run_other"):
            self.forward_ct += 1
            self.future_map.resolve_seq_lens_cpu(batch)
            self._wait_stream(self.forward_stream, self.schedule_stream)
            resolve_forward_inputs(batch, self.future_map)
            future_indices = "req_pool_indices"
            mode = batch.forward_mode  # _forward_isolation: the worker's edits are undone after
            batch_result = self.model_worker.forward_batch_generation(
                batch, on_publish=functools.partial(self.future_map.publish, future_indices))
            n = batch_result.cycle = self._last_cycle()
            # The tail of run_batch after the cycle function returned: the cycle's continuation.
            with ph("sched.run_other", n):
                batch_result.copy_done = Event(self.gpu)
                self._relay_forward_payload(batch, future_indices, batch_result)
                self._wait_stream(self.copy_stream, self.forward_stream)
                batch_result.copy_to_cpu(self.gpu, self.host_buf, self.dev_buf)
            batch.forward_mode = mode
            batch.spec_info = batch_result.next_draft_input
            return batch_result

    def _last_cycle(self):
        from oracle import O
        return O.n

    def _relay_forward_payload(self, batch, future_indices, batch_result):
        self.future_map.stash(future_indices, batch_result.next_draft_input)

    @scheduler_nvtx_method("scheduler.process_batch_result")
    def process_batch_result(self, batch, result):
        with ph("sched.result"):
            if batch.forward_mode == ForwardMode.DECODE:
                self.batch_result_processor.process_batch_result_decode(batch, result)
            else:
                self.batch_result_processor.process_batch_result_prefill(batch, result)


def run_scheduler_process(server_args, gpu):
    scheduler = Scheduler(server_args, gpu)
    scheduler.event_loop_overlap()
    return scheduler
