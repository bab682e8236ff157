"""vllm/v1/executor/uniproc_executor.py: UniProcExecutor runs the one worker in the engine core
process (VLLM::EngineCore). With async scheduling (max_concurrent_batches 2) a non-blocking
call whose result is an AsyncModelRunnerOutput hands its get_output to the WorkerAsyncOutput
thread and returns that future."""

from concurrent.futures import Future, ThreadPoolExecutor

from vllm.v1.outputs import AsyncModelRunnerOutput
from vllm.v1.serial_utils import run_method
from vllm.v1.worker.worker_base import WorkerWrapperBase


class UniProcExecutor(object):
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self._init_executor()

    def _init_executor(self):
        self.driver_worker = WorkerWrapperBase(rpc_rank=0)
        kwargs = dict(vllm_config=self.vllm_config, local_rank=0, rank=0,
                      distributed_init_method=None, is_driver_worker=True)
        self.async_output_thread = None
        if self.max_concurrent_batches > 1:
            self.async_output_thread = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="WorkerAsyncOutput")
        self.driver_worker.init_worker(all_kwargs=[kwargs])
        self.driver_worker.init_device()
        self.driver_worker.load_model()

    @property
    def max_concurrent_batches(self):
        return 2 if self.vllm_config.async_scheduling else 1

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False,
                       single_value=False):
        if kwargs is None:
            kwargs = {}
        if not non_block:
            result = run_method(self.driver_worker, method, args, kwargs)
            return result if single_value else [result]
        try:
            result = run_method(self.driver_worker, method, args, kwargs)
            if isinstance(result, AsyncModelRunnerOutput):
                if (async_thread := self.async_output_thread) is not None:
                    if single_value:
                        return async_thread.submit(result.get_output)

                    def get_output_list():
                        return [result.get_output()]

                    return async_thread.submit(get_output_list)
                result = result.get_output()
            future = Future()
            future.set_result(result if single_value else [result])
        except Exception as e:
            future = Future()
            future.set_exception(e)
        return future

    def execute_model(self, scheduler_output, non_block=False):
        output = self.collective_rpc("execute_model", args=(scheduler_output,),
                                     non_block=non_block, single_value=True)
        if non_block and output.done():
            output.result()
        return output

    def sample_tokens(self, grammar_output, non_block=False):
        return self.collective_rpc("sample_tokens", args=(grammar_output,),
                                   non_block=non_block, single_value=True)

    def take_draft_token_ids(self):
        return self.collective_rpc("take_draft_token_ids", single_value=True)

    def shutdown(self):
        if self.async_output_thread is not None:
            self.async_output_thread.shutdown(wait=True)
