"""transformers/generation/logits_process.py: the warpers sampling adds (temperature, top-k);
greedy decoding with a default config has none."""

import simtorch


class LogitsProcessorList(list):
    def __call__(self, input_ids, scores, **kwargs):
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class TemperatureLogitsWarper(object):
    def __init__(self, temperature):
        self.temperature = temperature

    def __call__(self, input_ids, scores):
        simtorch.DEV.k("binary")  # scores / temperature
        return scores


class TopKLogitsWarper(object):
    def __init__(self, top_k):
        self.top_k = top_k

    def __call__(self, input_ids, scores):
        # indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]; masked_fill
        simtorch.DEV.k("topk")
        simtorch.DEV.k("compare")
        simtorch.DEV.k("binary")
        return scores
