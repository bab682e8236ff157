"""vllm/v1/worker/gpu_worker.py: Worker delegates the step's RPCs to its model runner (model
runner V2, vllm/v1/worker/gpu/model_runner.py, when use_v2_model_runner)."""

import torch


class Worker(object):
    def __init__(self, vllm_config, local_rank=0, rank=0, distributed_init_method=None,
                 is_driver_worker=True):
        self.vllm_config = vllm_config
        self.rank = rank
        self.is_driver_worker = is_driver_worker
        self.device = "cuda:%d" % local_rank
        self.use_v2_model_runner = True
        if self.use_v2_model_runner:
            from vllm.v1.worker.gpu.model_runner import GPUModelRunner
        else:
            from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        self.model_runner = GPUModelRunner(vllm_config, self.device)

    def load_model(self):
        self.model_runner.load_model()

    def compile_or_warm_up_model(self):
        self.model_runner.capture_model()

    @torch.inference_mode()
    def sample_tokens(self, grammar_output):
        return self.model_runner.sample_tokens(grammar_output)

    @torch.inference_mode()
    def execute_model(self, scheduler_output):
        intermediate_tensors = None
        output = self.model_runner.execute_model(scheduler_output, intermediate_tensors)
        return output

    def take_draft_token_ids(self):
        return self.model_runner.take_draft_token_ids()

    def init_device(self):
        pass
