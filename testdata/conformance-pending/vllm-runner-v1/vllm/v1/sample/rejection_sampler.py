"""vllm/v1/sample/rejection_sampler.py: RejectionSampler.forward samples the bonus token with the
Sampler, then rejection_sample() accepts a prefix of the drafts (greedy: one triton kernel).
parse_output, a static method called from the runner's bookkeeping, copies the result to the
host (.cpu(): a blocking copy)."""

import ctypes

from torch import nn

import simgpu
from vllm.v1.sample.sampler import SamplerOutput


class RejectionSampler(nn.Module):
    def __init__(self, sampler):
        self.sampler = sampler

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        n = metadata.num_draft_tokens + 1
        self.sampler(logits=logits, sampling_metadata=sampling_metadata, num_tokens=1)
        rejection_sample(metadata.num_draft_tokens)
        return SamplerOutput(n)

    @staticmethod
    def parse_output(output_token_ids, vocab_size, discard_req_indices, logprobs_tensors=None):
        gpu = simgpu.GPU
        host = (ctypes.c_int32 * output_token_ids.width)()
        gpu.cuda.dtoh(host, gpu.buf, stream=gpu.stream, sync=True)
        return [list(host)], None


def rejection_sample(num_draft_tokens):
    simgpu.GPU.launch("rejection_greedy", num_draft_tokens)
