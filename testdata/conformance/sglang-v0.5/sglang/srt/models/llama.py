"""Mirrors sglang/srt/models/llama.py: the module nesting of a Llama forward; each launch stands
for one torch/flashinfer/cuBLAS op (roles in simkernels.KERNELS)."""


class LlamaDecoderLayer(object):
    def __init__(self, gpu, layer_id):
        self.gpu = gpu
        self.layer_id = layer_id

    def forward(self, forward_batch):
        gpu, n = self.gpu, forward_batch.num_tokens
        gpu.launch("rmsnorm" if self.layer_id == 0 else "fused_add_rmsnorm", n)
        gpu.launch("qkv_proj", n)
        gpu.launch("rope", n)
        gpu.launch("attn_decode" if forward_batch.forward_mode == 2 else "attn_extend", n)
        gpu.launch("o_proj", n)
        gpu.launch("fused_add_rmsnorm", n)
        gpu.launch("gate_up_proj", n)
        gpu.launch("act_and_mul", n)
        gpu.launch("down_proj", n)


class LlamaModel(object):
    def __init__(self, gpu, num_layers):
        self.gpu = gpu
        self.layers = [LlamaDecoderLayer(gpu, i) for i in range(num_layers)]

    def forward(self, forward_batch):
        self.gpu.launch("embedding", forward_batch.num_tokens)
        for layer in self.layers:
            layer.forward(forward_batch)
        self.gpu.launch("fused_add_rmsnorm", forward_batch.num_tokens)


class LogitsProcessorOutput(object):
    def __init__(self, num_tokens):
        self.num_tokens = num_tokens


class LlamaForCausalLM(object):
    def __init__(self, gpu, num_layers):
        self.gpu = gpu
        self.model = LlamaModel(gpu, num_layers)

    def forward(self, forward_batch):
        self.model.forward(forward_batch)
        self.gpu.launch("lm_head", forward_batch.num_tokens)  # LogitsProcessor
        return LogitsProcessorOutput(forward_batch.num_tokens)
