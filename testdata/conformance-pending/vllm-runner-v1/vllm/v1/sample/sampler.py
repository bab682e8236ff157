"""vllm/v1/sample/sampler.py: Sampler.forward (greedy here: an argmax kernel)."""

from torch import nn

import simgpu


class Sampler(nn.Module):
    def forward(self, logits=None, sampling_metadata=None, num_tokens=1):
        simgpu.GPU.launch("sample_argmax", num_tokens)
        return SamplerOutput(num_tokens)


class SamplerOutput(object):
    def __init__(self, width):
        self.sampled_token_ids = SimTensor(width)
        self.logprobs_tensors = None


class SimTensor(object):
    """A device tensor of shape [num_reqs, width] (only its width matters here)."""

    def __init__(self, width):
        self.width = width
        self.shape = (1, width)
