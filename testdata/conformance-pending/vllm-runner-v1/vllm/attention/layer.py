"""vllm/attention/layer.py: Attention.forward calls the unified_attention custom op, which torch
compile leaves out of the captured pieces (the splitting op of piecewise CUDA graphs)."""

from torch import nn

from vllm.forward_context import get_forward_context
from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl

_LAYERS = {}


class Attention(nn.Module):
    def __init__(self, prefix):
        self.layer_name = prefix
        self.impl = FlashAttentionImpl()
        _LAYERS[prefix] = self

    def forward(self, num_tokens):
        return unified_attention(num_tokens, self.layer_name)


def unified_attention(num_tokens, layer_name):
    ctx = get_forward_context()
    self = _LAYERS[layer_name]
    return self.impl.forward(self, num_tokens, ctx.attn_metadata)
