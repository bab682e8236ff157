"""vllm/v1/worker/gpu/spec_decode/rejection_sampler.py: RejectionSampler, called from
GPUModelRunner.sample when the batch has drafts: target sampling at every position, then the
accepted prefix of the drafts (greedy here), one kernel each."""

import simgpu
from vllm.v1.worker.gpu.sample.output import SamplerOutput


class RejectionSampler(object):
    def __init__(self, num_speculative_steps):
        self.num_speculative_steps = num_speculative_steps

    def __call__(self, logits, input_batch, draft_logits=None):
        gpu = simgpu.GPU
        gpu.launch("gumbel", input_batch.num_tokens)
        gpu.launch("rejection_greedy", input_batch.num_draft_tokens)
        return SamplerOutput(self.num_speculative_steps + 1)
