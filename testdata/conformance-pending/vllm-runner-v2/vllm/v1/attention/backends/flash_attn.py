"""vllm/v1/attention/backends/flash_attn.py: FlashAttentionImpl.forward writes the new K/V
into the paged cache and runs the attention kernel (eagerly between the pieces of a piecewise
CUDA graph, inside the graph of a full one)."""

import simgpu


class FlashAttentionImpl(object):
    def forward(self, layer, num_tokens, attn_metadata):
        gpu = simgpu.GPU
        gpu.launch("reshape_and_cache", num_tokens)
        gpu.launch("attn_decode" if attn_metadata.decode else "attn_prefill", num_tokens)
