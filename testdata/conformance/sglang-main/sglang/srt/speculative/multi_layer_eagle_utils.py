"""Mirrors sglang/srt/speculative/multi_layer_eagle_utils.py (main): the Triton helpers of
multi-layer EAGLE, one kernel launch each; no phase of their own (the calling worker or graph
runner frame decides)."""


def rotate_input_ids(gpu, num_tokens):
    # Shifts each request's extend window left by one and appends the step's top-1 token.
    gpu.launch("copy_next_token_ids", num_tokens)


def fill_draft_extend_prepare_buffers_triton(gpu, num_tokens):
    # Copies the draft-extend batch (input_ids, positions, out_cache_loc, seq_lens, accept
    # counts, select_index, hidden states) into the graph runner's static buffers.
    gpu.launch("copy_next_token_ids", num_tokens)
