"""vllm/v1/worker/gpu/cudagraph_utils.py: ModelCudaGraphManager captures the target model's FULL
graphs (uniform decode batches) and runs PIECEWISE ones through the compiled model; in
execute_model, run_fullgraph replays (CUDAGraph.replay) and run_pw_graph calls the model."""

import torch

from vllm.forward_context import FULL, NONE, PIECEWISE, set_forward_context


class BatchExecutionDescriptor(object):
    def __init__(self, num_tokens, cg_mode, num_reqs=None):
        self.num_tokens = num_tokens
        self.cg_mode = cg_mode
        self.num_reqs = num_reqs


class ModelCudaGraphManager(object):
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config
        self.graphs = {}
        self.full_sizes = vllm_config.full_sizes if vllm_config.mode == "graph" else []
        self.pw_sizes = vllm_config.piecewise_sizes if vllm_config.mode == "graph" else []

    def dispatch(self, num_tokens, uniform_decode):
        if num_tokens in self.full_sizes and uniform_decode:
            return BatchExecutionDescriptor(num_tokens, FULL, 1)
        if num_tokens in self.pw_sizes:
            return BatchExecutionDescriptor(num_tokens, PIECEWISE)
        return BatchExecutionDescriptor(num_tokens, NONE)

    @torch.inference_mode()
    def capture(self, model, attn_metadata_fn):
        for n in self.pw_sizes:
            with set_forward_context(attn_metadata_fn(n), self.vllm_config, num_tokens=n,
                                     cudagraph_runtime_mode=PIECEWISE):
                model(input_ids=None, positions=None, num_tokens=n)
        for n in self.full_sizes:
            self._capture_full_graph(n, model, attn_metadata_fn(n))

    def _capture_full_graph(self, num_tokens, model, attn_metadata):
        graph = torch.cuda.CUDAGraph()
        with set_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens,
                                 cudagraph_runtime_mode=NONE), torch.cuda.graph(graph):
            model(input_ids=None, positions=None, num_tokens=num_tokens)
        self.graphs[num_tokens] = graph

    def run_fullgraph(self, batch_desc):
        self.graphs[batch_desc.num_tokens].replay()
        return "hidden_states"

    def run_pw_graph(self, model, model_inputs):
        return model(**model_inputs)
