"""Mirrors sglang/srt/managers/tp_worker.py (TpModelWorker.forward_batch_generation: forward,
then sample unless verifying)."""

from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class TpModelWorker(object):
    def __init__(self, server_args, gpu, num_layers, is_draft_worker=False):
        self.server_args = server_args
        self.gpu = gpu
        self.model_runner = ModelRunner(server_args, gpu, num_layers, is_draft_worker=is_draft_worker)

    def forward_batch_generation(self, model_worker_batch, is_verify=False):
        forward_batch = ForwardBatch.init_new(model_worker_batch, self.model_runner)
        out = self.model_runner.forward(forward_batch)
        logits_output, can_run_cuda_graph = out.logits_output, out.can_run_graph
        if is_verify:
            return GenerationBatchResult(logits_output=logits_output, can_run_cuda_graph=can_run_cuda_graph)
        next_token_ids = self.model_runner.sample(logits_output, forward_batch)
        return GenerationBatchResult(logits_output=logits_output, next_token_ids=next_token_ids,
                                     can_run_cuda_graph=can_run_cuda_graph)
