"""vllm/model_executor/models/llama.py: the target model. LlamaModel is compiled
(@support_torch_compile); LlamaForCausalLM.forward runs it and compute_logits the lm_head."""

from torch import nn

import simgpu
from vllm.attention.layer import Attention
from vllm.compilation.decorators import support_torch_compile
from vllm.model_executor.layers.logits_processor import LogitsProcessor


class LlamaMLP(nn.Module):
    def forward(self, n):
        gpu = simgpu.GPU
        gpu.gemm("gate_up_proj", n)
        gpu.launch("act_and_mul", n)
        gpu.gemm("down_proj", n)


class LlamaAttention(nn.Module):
    def __init__(self, prefix):
        self.attn = Attention(prefix + ".attn")

    def forward(self, n):
        gpu = simgpu.GPU
        gpu.gemm("qkv_proj", n)
        gpu.launch("rope", n)
        self.attn(n)
        gpu.gemm("o_proj", n)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, prefix):
        self.self_attn = LlamaAttention(prefix + ".self_attn")
        self.mlp = LlamaMLP()

    def forward(self, n):
        gpu = simgpu.GPU
        gpu.launch("rmsnorm", n)
        self.self_attn(n)
        gpu.launch("rmsnorm", n)
        self.mlp(n)


@support_torch_compile
class LlamaModel(nn.Module):
    def __init__(self, num_layers, prefix="model"):
        self.layers = [LlamaDecoderLayer("%s.layers.%d" % (prefix, i)) for i in range(num_layers)]

    def forward(self, n):
        gpu = simgpu.GPU
        gpu.launch("embedding", n)
        for layer in self.layers:
            layer(n)
        gpu.launch("rmsnorm", n)

    def run_piece(self, i, n):
        """The kernels of piece i of the split graph (between attention i-1 and i)."""
        gpu = simgpu.GPU
        if i == 0:
            gpu.launch("embedding", n)
        else:
            gpu.gemm("o_proj", n)
            gpu.launch("rmsnorm", n)
            gpu.gemm("gate_up_proj", n)
            gpu.launch("act_and_mul", n)
            gpu.gemm("down_proj", n)
        if i < len(self.layers):
            gpu.launch("rmsnorm", n)
            gpu.gemm("qkv_proj", n)
            gpu.launch("rope", n)
        else:
            gpu.launch("rmsnorm", n)


class LlamaForCausalLM(nn.Module):
    def __init__(self, num_layers):
        self.model = LlamaModel(num_layers)
        self.logits_processor = LogitsProcessor()
        self.lm_head = "lm_head"

    def forward(self, input_ids=None, positions=None, num_tokens=1, **kwargs):
        return self.model(num_tokens)

    def compute_logits(self, hidden_states, num_tokens=1):
        return self.logits_processor(self.lm_head, hidden_states, num_tokens)
