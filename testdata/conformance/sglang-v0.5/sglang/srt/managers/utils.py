"""Mirrors the GenerationBatchResult dataclass (sglang/srt/managers/utils.py; v0.5 imports it
through managers/scheduler.py)."""


class GenerationBatchResult(object):
    def __init__(self, logits_output=None, next_token_ids=None, num_accepted_tokens=0,
                 accept_length_per_req_cpu=None, can_run_cuda_graph=False):
        self.logits_output = logits_output
        self.next_token_ids = next_token_ids
        self.num_accepted_tokens = num_accepted_tokens
        self.accept_length_per_req_cpu = accept_length_per_req_cpu
        self.can_run_cuda_graph = can_run_cuda_graph
        self.copy_done = None  # set only by the overlap scheduler (off for spec v1)
