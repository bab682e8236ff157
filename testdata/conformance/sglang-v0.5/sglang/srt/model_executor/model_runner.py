"""Mirrors sglang/srt/model_executor/model_runner.py (ModelRunner.forward -> _forward_raw ->
cuda graph replay / forward_decode / forward_extend)."""

from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.models.llama import LlamaForCausalLM


class ModelRunnerOutput(object):
    def __init__(self, logits_output, can_run_graph):
        self.logits_output = logits_output
        self.can_run_graph = can_run_graph


class ModelRunner(object):
    def __init__(self, server_args, gpu, num_layers, is_draft_worker=False):
        self.server_args = server_args
        self.gpu = gpu
        self.model = LlamaForCausalLM(gpu, num_layers)
        self.graph_runner = None
        if not is_draft_worker and not server_args.disable_cuda_graph:
            self.graph_runner = CudaGraphRunner(self)

    def forward(self, forward_batch, skip_attn_backend_init=False, pp_proxy_tensors=None):
        return self._forward_raw(forward_batch, skip_attn_backend_init, pp_proxy_tensors)

    def _forward_raw(self, forward_batch, skip_attn_backend_init, pp_proxy_tensors):
        can_run_graph = bool(self.graph_runner is not None and self.graph_runner.can_run(forward_batch))
        if can_run_graph:
            ret = self.graph_runner.replay(forward_batch, skip_attn_backend_init=skip_attn_backend_init)
        elif forward_batch.forward_mode == ForwardMode.DECODE:
            ret = self.forward_decode(forward_batch)
        else:
            ret = self.forward_extend(forward_batch, skip_attn_backend_init)
        return ModelRunnerOutput(ret, can_run_graph)

    def forward_decode(self, forward_batch):
        return self.model.forward(forward_batch)

    def forward_extend(self, forward_batch, skip_attn_backend_init=False):
        if not skip_attn_backend_init:
            self.gpu.launch("seq_lens_sum", forward_batch.batch_size)  # attn_backend.init_forward_metadata
        return self.model.forward(forward_batch)

    def sample(self, logits_output, forward_batch):
        self.gpu.launch("fast_topk", forward_batch.batch_size)  # Sampler: argmax / top-k sampling
