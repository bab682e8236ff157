"""vllm/v1/executor/multiproc_executor.py: WorkerProc, the loop of one worker process
(VLLM::Worker_TP<r>). worker_busy_loop runs each RPC the engine core broadcasts on the worker
and hands the output of the output rank to handle_output: enqueued at once (enqueue_output,
which waits for an AsyncModelRunnerOutput's host copy with get_output), or with async scheduling
put on a queue for the async_output_busy_loop thread, which does that wait."""

import queue
import threading
from enum import Enum
from functools import partial

import simgpu
from simgpu import at_outside
from vllm.distributed.device_communicators.shm_broadcast import MessageQueue
from vllm.v1.outputs import AsyncModelRunnerOutput
from vllm.v1.worker.worker_base import WorkerWrapperBase


class WorkerProc(object):
    """Wrapper that runs one Worker in a separate process."""

    READY_STR = "READY"

    class ResponseStatus(Enum):
        SUCCESS = 1
        FAILURE = 2

    def __init__(self, vllm_config, local_rank, rank, distributed_init_method, rpcs):
        self.rank = rank
        wrapper = WorkerWrapperBase(vllm_config=vllm_config, rpc_rank=rank)
        all_kwargs = [{"vllm_config": vllm_config, "local_rank": local_rank, "rank": rank,
                       "distributed_init_method": distributed_init_method,
                       "is_driver_worker": True}]
        wrapper.init_worker(all_kwargs)
        self.worker = wrapper
        self.rpc_broadcast_mq = MessageQueue(rpcs)
        self.worker_response_mq = MessageQueue()
        self.use_async_scheduling = vllm_config.async_scheduling
        if self.use_async_scheduling:
            self.async_output_queue = queue.Queue()
            self.async_output_copy_thread = threading.Thread(
                target=self.async_output_busy_loop, daemon=True, name="WorkerAsyncOutputCopy")
            self.async_output_copy_thread.start()
        self.worker.load_model()
        self.worker.compile_or_warm_up_model()

    def enqueue_output(self, output):
        if isinstance(output, AsyncModelRunnerOutput):
            output = output.get_output()
        if isinstance(output, Exception):
            result = (WorkerProc.ResponseStatus.FAILURE, str(output))
        else:
            result = (WorkerProc.ResponseStatus.SUCCESS, output)
        if (response_mq := self.worker_response_mq) is not None:
            response_mq.enqueue(result)

    def handle_output(self, output):
        if self.use_async_scheduling:
            self.async_output_queue.put(output)
        else:
            self.enqueue_output(output)

    def async_output_busy_loop(self):
        """Entrypoint for the thread which handles outputs asynchronously."""
        # A thread does not inherit the main thread's context: make the worker's current.
        with at_outside("loop"):
            simgpu.GPU.cuda.set_current()
        while True:
            output = self.async_output_queue.get()
            if output is _STOP:  # workload shutdown (the real thread is a daemon)
                return
            self.enqueue_output(output)

    def worker_busy_loop(self):
        """Main busy loop for Multiprocessing Workers"""
        while True:
            method, args, kwargs, output_rank = self.rpc_broadcast_mq.dequeue(indefinite=True)
            try:
                if isinstance(method, str):
                    func = getattr(self.worker, method)
                else:
                    func = partial(method, self.worker)
                output = func(*args, **kwargs)
                if output_rank is None or self.rank == output_rank:
                    self.handle_output(output)
            except Exception as e:
                if output_rank is None or self.rank == output_rank:
                    self.handle_output(e)
                raise

    @staticmethod
    def worker_main(vllm_config, rpcs, on_ready=None):
        worker = WorkerProc(vllm_config, 0, 0, None, rpcs)
        if on_ready is not None:
            on_ready(worker)
        try:
            worker.worker_busy_loop()
        except SystemExit:
            pass
        if worker.use_async_scheduling:
            worker.async_output_queue.put(_STOP)
            worker.async_output_copy_thread.join()
        return worker


_STOP = object()
