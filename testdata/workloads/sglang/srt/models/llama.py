"""Mirrors sglang/srt/models/llama.py: the module nesting of a Llama forward. Each kernel launch
stands for the torch/flashinfer/cuBLAS op of the real layer (roles in simkernels.KERNELS). The
EAGLE draft model (real: llama_eagle.py) is the same structure with fewer layers and no
tensor-parallel all-reduce."""

from sglang.srt.distributed.communication_op import tensor_model_parallel_all_reduce
from sglang.srt.model_executor.forward_batch_info import ForwardMode


class LlamaAttention(object):
    def __init__(self, gpu):
        self.gpu = gpu

    def forward(self, forward_batch):
        gpu, n = self.gpu, forward_batch.num_tokens
        gpu.launch("qkv_proj", n)
        gpu.launch("rope", n)
        if ForwardMode.is_decode(forward_batch.forward_mode):
            gpu.launch("attn_decode", n)
        else:
            gpu.launch("attn_extend", n)
        gpu.launch("o_proj", n)


class LlamaMLP(object):
    def __init__(self, gpu, tp_group, hidden_size):
        self.gpu = gpu
        self.tp_group = tp_group
        self.hidden_size = hidden_size

    def forward(self, forward_batch):
        gpu, n = self.gpu, forward_batch.num_tokens
        gpu.launch("gate_up_proj", n)
        gpu.launch("act_and_mul", n)
        gpu.launch("down_proj", n)
        if self.tp_group is not None:  # RowParallelLinear(reduce_results=True)
            tensor_model_parallel_all_reduce(self.tp_group, self.hidden_size * n)


class LlamaDecoderLayer(object):
    def __init__(self, gpu, layer_id, tp_group, hidden_size):
        self.gpu = gpu
        self.layer_id = layer_id
        self.self_attn = LlamaAttention(gpu)
        self.mlp = LlamaMLP(gpu, tp_group, hidden_size)

    def forward(self, forward_batch):
        gpu, n = self.gpu, forward_batch.num_tokens
        gpu.launch("rmsnorm" if self.layer_id == 0 else "fused_add_rmsnorm", n)
        self.self_attn.forward(forward_batch)
        gpu.launch("fused_add_rmsnorm", n)
        self.mlp.forward(forward_batch)


class LlamaModel(object):
    def __init__(self, gpu, num_layers, tp_group, hidden_size):
        self.gpu = gpu
        self.layers = [LlamaDecoderLayer(gpu, i, tp_group, hidden_size) for i in range(num_layers)]

    def forward(self, forward_batch):
        self.gpu.launch("embedding", forward_batch.num_tokens)
        for layer in self.layers:
            layer.forward(forward_batch)
        self.gpu.launch("fused_add_rmsnorm", forward_batch.num_tokens)


class LogitsProcessorOutput(object):
    __slots__ = ("num_tokens",)

    def __init__(self, num_tokens):
        self.num_tokens = num_tokens


class LlamaForCausalLM(object):
    def __init__(self, gpu, num_layers, tp_group=None, hidden_size=4096):
        self.gpu = gpu
        self.model = LlamaModel(gpu, num_layers, tp_group, hidden_size)

    def forward(self, forward_batch):
        self.model.forward(forward_batch)
        self.gpu.launch("lm_head", forward_batch.num_tokens)  # LogitsProcessor
        return LogitsProcessorOutput(forward_batch.num_tokens)
