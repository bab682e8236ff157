"""vllm/compilation/cuda_graph.py: CUDAGraphWrapper captures its runnable on the first call of a
batch shape in its runtime mode and replays it afterwards (torch.cuda.CUDAGraph.replay); in any
other mode it runs the runnable."""

import torch

from vllm.forward_context import get_forward_context


class CUDAGraphWrapper(object):
    def __init__(self, runnable, runtime_mode):
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.entries = {}

    def __call__(self, *args, **kwargs):
        ctx = get_forward_context()
        if ctx is None or ctx.cudagraph_runtime_mode != self.runtime_mode:
            return self.runnable(*args, **kwargs)
        key = ctx.num_tokens
        g = self.entries.get(key)
        if g is None:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = self.runnable(*args, **kwargs)
            self.entries[key] = g
            return out
        g.replay()
        return None

    def __getattr__(self, key):
        # Attributes of the wrapped model (compute_logits, ...) pass through.
        if key == "runnable":
            raise AttributeError(key)
        return getattr(self.runnable, key)

    def unwrap(self):
        return self.runnable
