"""vllm/v1/worker/gpu/input_batch.py: InputBatch and the triton kernels that build a step's
inputs on the device (positions and seq_lens, the sampled and draft tokens as input ids) and
update the request state after sampling (post_update)."""

import simgpu


class InputBatch(object):
    def __init__(self, num_reqs, num_tokens, num_draft_tokens, has_prefill):
        self.num_reqs = num_reqs
        self.num_tokens = num_tokens
        self.num_tokens_after_padding = num_tokens
        self.num_draft_tokens = num_draft_tokens
        self.has_prefill = has_prefill
        self.req_ids = ["req-0"]
        self.idx_mapping = "idx_mapping"
        self.logits_indices = "logits_indices"
        self.query_start_loc = "query_start_loc"
        self.has_structured_output_reqs = False


def prepare_prefill_inputs(num_tokens):
    simgpu.GPU.launch("prepare_input_ids", num_tokens)


def prepare_pos_seq_lens(num_reqs):
    simgpu.GPU.launch("prepare_pos_seq_lens", num_reqs)


def combine_sampled_and_draft_tokens(num_reqs):
    simgpu.GPU.launch("combine_sampled_and_draft", num_reqs)


def expand_idx_mapping(num_logits):
    simgpu.GPU.launch("index_select", num_logits)


def post_update(num_reqs):
    simgpu.GPU.launch("post_update", num_reqs)
