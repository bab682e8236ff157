"""Mirrors sglang/srt/managers/tp_worker.py (main): TpModelWorker.forward_batch_generation takes a
ScheduleBatch, or a prepared forward_batch (spec v2 verify); samples unless verifying."""

from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class TpModelWorker(object):
    def __init__(self, server_args, gpu, num_layers, is_draft_worker=False):
        self.server_args = server_args
        self.gpu = gpu
        self.model_runner = ModelRunner(server_args, gpu, num_layers, is_draft_worker=is_draft_worker)

    def forward_batch_generation(self, batch=None, forward_batch=None, is_verify=False,
                                 capture_hidden_mode=None, pp_proxy_tensors=None):
        if forward_batch is None:
            forward_batch = ForwardBatch.init_new(batch.get_model_worker_batch(), self.model_runner)
        out = self.model_runner.forward(forward_batch)
        if is_verify:
            return GenerationBatchResult(logits_output=out.logits_output, can_run_cuda_graph=out.can_run_graph)
        next_token_ids = self.model_runner.sample(out.logits_output, forward_batch)
        return GenerationBatchResult(logits_output=out.logits_output, next_token_ids=next_token_ids,
                                     can_run_cuda_graph=out.can_run_graph)
