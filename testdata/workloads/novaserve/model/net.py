"""A small transformer: TinyNet → Block → Attention / MLP, each launching its kernels."""

from fakecuda import tag, truth_tag


class Attention(object):
    def __init__(self, gpu, k):
        self.gpu, self.k = gpu, k

    def forward(self, stream):
        for role in ("qkv", "attn", "o_proj"):
            self.gpu.launch(self.k[role], stream, ex=role != "attn")


class MLP(object):
    def __init__(self, gpu, k):
        self.gpu, self.k = gpu, k

    def forward(self, stream):
        for role in ("gate_up", "act", "down"):
            self.gpu.launch(self.k[role], stream, ex=role != "act")


class Block(object):
    def __init__(self, gpu, k):
        self.attn = Attention(gpu, k)
        self.mlp = MLP(gpu, k)

    def forward(self, stream):
        self.attn.forward(stream)
        self.mlp.forward(stream)


class TinyNet(object):
    def __init__(self, gpu, k, layers):
        self.gpu, self.k = gpu, k
        self.blocks = [Block(gpu, k) for _ in range(layers)]

    def forward(self, stream):
        self.gpu.launch(self.k["embed"], stream)
        for b in self.blocks:
            b.forward(stream)
        self.gpu.launch(self.k["lm_head"], stream, ex=True)

    def init_weights(self, stream):
        """Start-up: outside every step (phase other, outside cycles)."""
        with tag(truth_tag("other")):
            for _ in range(4):
                self.gpu.launch(self.k["init"], stream)
