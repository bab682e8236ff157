"""vllm/compilation/piecewise_backend.py: the split graph of a compiled model: the pieces between
attention ops, each behind a CUDAGraphWrapper in PIECEWISE mode, and the unified_attention calls
between them."""

from vllm.attention.layer import unified_attention
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.forward_context import PIECEWISE


class PiecewiseBackend(object):
    def __init__(self, model):
        self.model = model
        n = len(model.layers)
        self.pieces = [CUDAGraphWrapper(_Piece(model, i), PIECEWISE) for i in range(n + 1)]

    def __call__(self, num_tokens, *args, **kwargs):
        for i, layer in enumerate(self.model.layers):
            self.pieces[i](num_tokens)
            unified_attention(num_tokens, layer.self_attn.attn.layer_name)
        self.pieces[-1](num_tokens)


class _Piece(object):
    """One submodule of the split graph (an fx GraphModule in vLLM)."""

    def __init__(self, model, index):
        self.model = model
        self.index = index

    def __call__(self, num_tokens):
        self.model.run_piece(self.index, num_tokens)
