"""vllm/model_executor/models/llama_eagle3.py: the EAGLE3 draft head: combine_hidden_states (fc
over the target's auxiliary hidden states), one decoder layer (compiled), its own lm_head."""

from torch import nn

import simgpu
from vllm.compilation.decorators import support_torch_compile
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.models.llama import LlamaDecoderLayer


@support_torch_compile
class LlamaModel(nn.Module):
    def __init__(self, num_layers=1, prefix="draft_model"):
        self.layers = [LlamaDecoderLayer("%s.layers.%d" % (prefix, i)) for i in range(num_layers)]

    def forward(self, n):
        gpu = simgpu.GPU
        gpu.launch("embedding", n)
        for layer in self.layers:
            layer(n)
        gpu.launch("rmsnorm", n)

    def run_piece(self, i, n):
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


class Eagle3LlamaForCausalLM(nn.Module):
    def __init__(self):
        self.model = LlamaModel()
        self.logits_processor = LogitsProcessor()
        self.lm_head = "lm_head"

    def forward(self, input_ids=None, positions=None, hidden_states=None, num_tokens=1, **kwargs):
        return self.model(num_tokens)

    def combine_hidden_states(self, hidden_states, num_tokens=1):
        simgpu.GPU.gemm("combine_hidden", num_tokens)

    def compute_logits(self, hidden_states, num_tokens=1):
        return self.logits_processor(self.lm_head, hidden_states, num_tokens)
