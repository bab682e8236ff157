"""vllm/v1/worker/gpu/sample/sampler.py: Sampler, for steps without drafts (Gumbel sampling
kernel; greedy requests take the argmax)."""

import simgpu
from vllm.v1.worker.gpu.sample.output import SamplerOutput


class Sampler(object):
    def __call__(self, logits, input_batch):
        simgpu.GPU.launch("gumbel", input_batch.num_reqs)
        return SamplerOutput(1)
