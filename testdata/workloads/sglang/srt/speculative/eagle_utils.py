"""Mirrors sglang/srt/speculative/eagle_utils.py (tree building; newer SGLang keeps
select_top_k_tokens in spec_utils.py)."""

from fakecuda import tag


def select_top_k_tokens(gpu, i, forward_batch):
    gpu.launch("select_top_k_tokens", forward_batch.batch_size)


def organize_draft_results(gpu, forward_batch):
    gpu.launch("organize_draft_results", forward_batch.batch_size)
    return None, None, None  # parent_list, top_scores_index, draft_tokens


def build_tree_kernel_efficient(gpu, batch_size, verified_id, parent_list, top_scores_index,
                                draft_tokens, seq_lens, seq_lens_sum, topk, spec_steps,
                                num_verify_tokens):
    with tag("spec.draft"):
        gpu.launch("build_tree", batch_size * num_verify_tokens)
        return None  # tree_mask, positions, retrive_index, ... (host side needs none)
