"""Mirrors sglang/srt/speculative/spec_utils.py (main): helpers with no phase of their own."""


def select_top_k_tokens(gpu, i, forward_batch):
    gpu.launch("select_top_k_tokens", forward_batch.num_tokens)


def fast_topk(gpu, n):
    gpu.launch("fast_topk", n)
