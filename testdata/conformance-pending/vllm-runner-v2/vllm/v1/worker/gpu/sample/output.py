"""vllm/v1/worker/gpu/sample/output.py: SamplerOutput (sampled ids [num_reqs, width], and the
per-request counts of sampled and rejected tokens)."""


class SamplerOutput(object):
    def __init__(self, width):
        self.width = width
        self.sampled_token_ids = "sampled_token_ids"
        self.num_sampled = "num_sampled"
        self.num_rejected = "num_rejected"
        self.logprobs_tensors = None
