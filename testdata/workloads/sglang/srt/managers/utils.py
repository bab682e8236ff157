"""Mirrors sglang/srt/managers/utils.py (GenerationBatchResult)."""


class GenerationBatchResult(object):
    def __init__(self, logits_output=None, num_accepted_tokens=0, accept_length_per_req_cpu=None,
                 can_run_cuda_graph=False):
        self.logits_output = logits_output
        self.num_accepted_tokens = num_accepted_tokens
        self.accept_length_per_req_cpu = accept_length_per_req_cpu or []
        self.can_run_cuda_graph = can_run_cuda_graph
