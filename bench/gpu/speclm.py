"""The draft/target pair of the SGLang-shaped EAGLE loop (bench/gpu/spec_loop.py --worker sglang).

Both models map (token, position) to next-token logits: embedding + position embedding, residual
MLP blocks (pre-LayerNorm, up / GELU / down), LayerNorm, LM head; bf16, random weights from a
seeded generator, greedy. The target is the draft plus `extra_blocks` blocks whose down
projections are `scale` x random noise: at scale 0 the extra blocks are the identity and the
target's greedy token equals the draft's; the larger the scale, the more they disagree. The
scale is calibrated (benchphase.calibrate_scale) to a per-token agreement p, so an EAGLE cycle of
K draft steps accepts 1 + p + ... + p^K tokens on average (p = 0.7, K = 4: about 2.8).

Default sizes (spec_loop.py): vocab 32000, hidden 4096, ffn 11008; draft 1 block (~0.4 B
parameters with embeddings and head), target 8 blocks (~1.0 B).

Tensor parallelism (shard_tp, spec_loop.py --tp-size N): every rank builds the same full models
from the seed, then keeps its slice of each block, Megatron-style as SGLang shards a Llama MLP:
`up` column-parallel (ffn/N output rows), `down` row-parallel (ffn/N input columns), and the
partial sums of `down` all-reduced across the ranks (torch.distributed, NCCL) once per block.
Embeddings, norms and the LM head stay replicated, so every rank computes the same greedy tokens.
"""

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, hidden, ffn, device, dtype):
        super().__init__()
        self.up = torch.nn.Linear(hidden, ffn, bias=False, device=device, dtype=dtype)
        self.down = torch.nn.Linear(ffn, hidden, bias=False, device=device, dtype=dtype)
        self.tp_group = None  # set by shard_tp: all-reduce the down projection's partial sums

    def forward(self, h):
        out = self.down(F.gelu(self.up(F.layer_norm(h, (h.shape[-1],)))))
        if self.tp_group is not None:
            torch.distributed.all_reduce(out, group=self.tp_group)
        return h + out


class TokenLM(torch.nn.Module):
    def __init__(self, vocab, hidden, ffn, blocks, max_pos, device, dtype):
        super().__init__()
        self.max_pos = max_pos
        self.emb = torch.nn.Embedding(vocab, hidden, device=device, dtype=dtype)
        self.pos_emb = torch.nn.Embedding(max_pos, hidden, device=device, dtype=dtype)
        self.blocks = torch.nn.ModuleList([Block(hidden, ffn, device, dtype) for _ in range(blocks)])
        self.head = torch.nn.Linear(hidden, vocab, bias=False, device=device, dtype=dtype)

    def forward(self, ids, pos):
        h = self.emb(ids) + self.pos_emb(torch.remainder(pos, self.max_pos))
        for b in self.blocks:
            h = b(h)
        return self.head(F.layer_norm(h, (h.shape[-1],)))

    def greedy(self, ids, pos):
        return self.forward(ids, pos).argmax(-1)


def build_pair(vocab, hidden, ffn, draft_blocks, extra_blocks, max_pos, seed, device="cuda",
               dtype=torch.bfloat16, std=0.02):
    """Returns (draft, target, noise): noise is a list of (down weight of an extra target block,
    its random values at scale 1) for set_scale."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    draft = TokenLM(vocab, hidden, ffn, draft_blocks, max_pos, device, dtype)
    target = TokenLM(vocab, hidden, ffn, draft_blocks + extra_blocks, max_pos, device, dtype)
    noise = []
    with torch.no_grad():
        for _, p in draft.named_parameters():
            p.normal_(0.0, std, generator=g)
        dp = dict(draft.named_parameters())
        copied = 0
        for name, p in target.named_parameters():
            if name in dp:
                p.copy_(dp[name])
                copied += 1
                continue
            p.normal_(0.0, std, generator=g)
            if name.endswith("down.weight"):
                noise.append((p, p.detach().clone()))
    if copied != len(dp) or len(noise) != extra_blocks:
        raise RuntimeError("build_pair: copied %d of %d draft tensors, %d noise tensors for %d extra blocks"
                           % (copied, len(dp), len(noise), extra_blocks))
    draft.eval().requires_grad_(False)
    target.eval().requires_grad_(False)
    return draft, target, noise


def shard_tp(model, rank, world, group=None, force=False):
    """Keeps rank's slice of every block of model (see the module docstring); group None is the
    default process group. The noise tensors of build_pair stay full-size: call set_scale before
    sharding. One rank shards nothing unless force (the all-reduces still run)."""
    if world <= 1 and not force:
        return model
    with torch.no_grad():
        for b in model.blocks:
            ffn = b.up.weight.shape[0]
            if ffn % world:
                raise ValueError("shard_tp: ffn %d does not divide into %d ranks" % (ffn, world))
            n = ffn // world
            lo, hi = rank * n, (rank + 1) * n
            b.up.weight = torch.nn.Parameter(b.up.weight[lo:hi].contiguous(), requires_grad=False)
            b.down.weight = torch.nn.Parameter(b.down.weight[:, lo:hi].contiguous(), requires_grad=False)
            b.up.out_features = n
            b.down.in_features = n
            b.tp_group = group if group is not None else torch.distributed.group.WORLD
    return model


def set_scale(noise, scale):
    with torch.no_grad():
        for p, n in noise:
            p.copy_(n * scale)


def agreement(draft, target, vocab, max_pos, n=8192, seed=1234, device="cuda"):
    """Share of (token, position) pairs where the target's greedy token equals the draft's.
    The tokens are ones the draft itself produces (what the target verifies in a cycle)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    ids = torch.randint(0, vocab, (n,), device=device, generator=g)
    pos = torch.randint(0, max_pos, (n,), device=device, generator=g)
    with torch.inference_mode():
        ids = draft.greedy(ids, pos)
        pos2 = torch.remainder(pos + 1, max_pos)
        a = draft.greedy(ids, pos2)
        b = target.greedy(ids, pos2)
        return float((a == b).float().mean().item())
