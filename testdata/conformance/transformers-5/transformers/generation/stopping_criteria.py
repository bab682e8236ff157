"""transformers/generation/stopping_criteria.py: each criterion returns a bool tensor on the
device; StoppingCriteriaList ORs them (fill, then one kernel per criterion)."""

import simtorch
from simtorch import Tensor


class StoppingCriteria(object):
    pass


class MaxLengthCriteria(StoppingCriteria):
    def __init__(self, max_length):
        self.max_length = max_length

    def __call__(self, input_ids, scores, **kwargs):
        is_done = input_ids.shape[1] >= self.max_length
        return simtorch.full((input_ids.shape[0],), is_done)


class EosTokenCriteria(StoppingCriteria):
    def __init__(self, eos_token_id):
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids, scores, **kwargs):
        # isin_mps_friendly(input_ids[:, -1], self.eos_token_id)
        simtorch.DEV.k("compare")
        return Tensor(input_ids.host[-1] == self.eos_token_id.host)


class ConfidenceCriteria(StoppingCriteria):
    """Stops the assistant when its confidence in the last drafted token is below the
    threshold: probs = scores[-1].softmax(-1); p = probs[0, input_ids[0, -1]].item()."""

    def __init__(self, assistant_confidence_threshold):
        self.assistant_confidence_threshold = assistant_confidence_threshold

    def __call__(self, input_ids, scores, **kwargs):
        simtorch.DEV.k("softmax")
        simtorch.DEV.k("index")
        p = Tensor(simtorch.ORACLE.confidence(len(input_ids.host) - 1)).item()
        if p < self.assistant_confidence_threshold:
            return True
        return False


class StoppingCriteriaList(list):
    def __call__(self, input_ids, scores, **kwargs):
        is_done = simtorch.full((input_ids.shape[0],), False)
        for criteria in self:
            is_done = is_done | criteria(input_ids, scores, **kwargs)
        return is_done

    @property
    def max_length(self):
        for c in self:
            if isinstance(c, MaxLengthCriteria):
                return c.max_length
        return None
