"""vllm/v1/worker/gpu/spec_decode/autoregressive/cudagraph_utils.py: SpeculatorCudaGraphManager
captures a whole draft routine (draft prefill: forward + compute_logits + sampling; one draft
decode step) per batch size as one FULL graph; PIECEWISE draft prefills go through the compiled
model."""

import torch

from vllm.forward_context import FULL, NONE, PIECEWISE, set_forward_context
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor


class SpeculatorCudaGraphManager(object):
    def __init__(self, vllm_config, full_sizes, pw_sizes):
        self.vllm_config = vllm_config
        self.full_sizes = full_sizes if vllm_config.mode == "graph" else []
        self.pw_sizes = pw_sizes if vllm_config.mode == "graph" else []
        self.graphs = {}

    def dispatch(self, num_tokens, uniform):
        if uniform and num_tokens in self.full_sizes:
            return BatchExecutionDescriptor(num_tokens, FULL, num_tokens)
        if num_tokens in self.pw_sizes:
            return BatchExecutionDescriptor(num_tokens, PIECEWISE)
        return BatchExecutionDescriptor(num_tokens, NONE)

    def capture(self, fn, attn_metadata_fn):
        for n in self.full_sizes:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn(n, attn_metadata_fn(n))
            self.graphs[n] = graph

    def capture_piecewise(self, model, attn_metadata_fn):
        for n in self.pw_sizes:
            with set_forward_context(attn_metadata_fn(n), self.vllm_config, num_tokens=n,
                                     cudagraph_runtime_mode=PIECEWISE):
                model(input_ids=None, positions=None, hidden_states=None, num_tokens=n)

    def run_fullgraph(self, batch_desc):
        self.graphs[batch_desc.num_tokens].replay()

    def run_pw_graph(self, model, model_inputs):
        return model(**model_inputs)
