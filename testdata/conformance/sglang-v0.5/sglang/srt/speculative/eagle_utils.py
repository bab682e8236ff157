"""Mirrors sglang/srt/speculative/eagle_utils.py (v0.5): build_tree_kernel_efficient and
organize_draft_results (module-level functions)."""


def organize_draft_results(gpu, forward_batch):
    gpu.launch("organize_draft_results", forward_batch.batch_size)  # cat + topk + sort + gather
    return "parent_list", "top_scores_index", "draft_tokens"


def build_tree_kernel_efficient(gpu, bs):
    gpu.launch("build_tree", bs)  # sgl_kernel.build_tree_kernel_efficient
