"""Mirrors sglang/srt/speculative/spec_utils.py: the triton/torch helpers the EAGLE worker calls
(no phase of their own: their calls belong to the caller's phase)."""


def assign_draft_cache_locs(gpu, bs):
    gpu.launch("assign_draft_cache_locs", bs)  # assign_draft_cache_locs[(num_seqs,)](...)


def select_top_k_tokens(gpu, i, forward_batch):
    gpu.launch("select_top_k_tokens", forward_batch.num_tokens)


def fast_topk(gpu, n):
    gpu.launch("fast_topk", n)  # torch.softmax + fast_topk
