"""vllm/v1/worker/worker_base.py: WorkerWrapperBase forwards every attribute to the worker it
wraps (the busy loop's getattr(self.worker, method))."""


class WorkerWrapperBase(object):
    def __init__(self, vllm_config=None, rpc_rank=0):
        self.rpc_rank = rpc_rank
        self.worker = None

    def init_worker(self, all_kwargs):
        from vllm.v1.worker.gpu_worker import Worker
        self.worker = Worker(**all_kwargs[self.rpc_rank])

    def __getattr__(self, attr):
        return getattr(self.worker, attr)
