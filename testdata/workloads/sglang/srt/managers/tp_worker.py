"""Mirrors sglang/srt/managers/tp_worker.py (TpModelWorker)."""

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner


class TpModelWorker(object):
    def __init__(self, server_args, gpu, num_layers, is_draft_worker=False, tp_group=None):
        self.server_args = server_args
        self.gpu = gpu
        self.model_runner = ModelRunner(server_args, gpu, num_layers,
                                        is_draft_worker=is_draft_worker, tp_group=tp_group)

    def forward_batch_generation(self, model_worker_batch, is_verify=False):
        forward_batch = ForwardBatch.init_new(model_worker_batch, self.model_runner)
        logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)
        return logits_output, can_run_cuda_graph
