"""transformers/generation/candidate_generator.py (5.x): AssistedCandidateGenerator drafts with
a nested `assistant_model.generate` (-> _sample), trims the assistant's cache first
(_update_past_and_masks -> Cache.crop), and adapts its confidence threshold in
update_candidate_strategy when scikit-learn is installed."""

import copy

import simtorch
from simtorch import Tensor

from .logits_process import LogitsProcessorList

_SKLEARN = [False]  # is_sklearn_available(): set by the workload (--sklearn)


def is_sklearn_available():
    return _SKLEARN[0]


def roc_curve(matches, probs):
    """sklearn.metrics.roc_curve on host lists: no CUDA work."""
    return [0.0, 1.0], [0.0, 1.0], [0.9, 0.4]


class CandidateGenerator(object):
    def get_candidates(self, input_ids, **kwargs):
        raise NotImplementedError

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        raise NotImplementedError


class AssistedCandidateGenerator(CandidateGenerator):
    def __init__(self, input_ids, assistant_model, generation_config, model_kwargs, inputs_tensor=None,
                 logits_processor=None):
        # input_ids.to(assistant device): the same device, no copy
        self.assistant_model = assistant_model
        self.assistant_generation_config = copy.deepcopy(assistant_model.generation_config)
        self.assistant_generation_config.update(
            defaults_only=True, **self.assistant_generation_config._get_default_generation_params())
        self.num_assistant_tokens = self.assistant_generation_config.num_assistant_tokens
        self.assistant_confidence_threshold = self.assistant_generation_config.assistant_confidence_threshold
        self.assistant_generation_config.eos_token_id = generation_config.eos_token_id
        assistant_kwargs = {}
        for key, value in model_kwargs.items():
            if key not in ("encoder_outputs", "past_key_values"):
                # value.detach().to(device): the same device, no copy
                assistant_kwargs[key] = value if isinstance(value, Tensor) else copy.deepcopy(value)
        self.assistant_kwargs = assistant_kwargs
        self.input_ids_key = "input_ids"
        self.logits_processor = logits_processor if logits_processor is not None else LogitsProcessorList()
        self.generation_config = copy.copy(generation_config)
        self.generation_config.return_dict_in_generate = True
        self.generation_config.output_scores = True
        self.generation_config.assistant_confidence_threshold = self.assistant_confidence_threshold
        self.generation_config.is_assistant = True
        self.main_model_min_length = self.generation_config.min_length or 0
        self.generation_config.min_length = None
        self.generation_config.min_new_tokens = None
        self.main_model_max_length = self.generation_config.max_length
        self.generation_config.max_length = None
        self.generation_config.cache_implementation = "dynamic_full"
        if (is_sklearn_available() and self.assistant_generation_config.assistant_confidence_threshold
                and type(self) is AssistedCandidateGenerator):
            self.probs = []
            self.matches = []

    def get_candidates(self, input_ids, **kwargs):
        min_new_tokens, max_new_tokens = self._calculate_new_tokens(input_ids)
        if max_new_tokens == 0:
            return input_ids, None
        self._update_past_and_masks(input_ids)
        generation_args = self._prepare_generation_args(input_ids, min_new_tokens, max_new_tokens)
        candidate_ids, candidate_logits = self._generate_candidates(generation_args)
        return candidate_ids, candidate_logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        if self.assistant_generation_config.num_assistant_tokens_schedule in {"heuristic", "heuristic_transient"}:
            # len(scores[0]) - 1 candidates: num_matches is a device tensor, so the comparison
            # is one kernel and the `if` a copy back
            if num_matches == scores.shape[1] - 1:
                self.num_assistant_tokens += 2
            else:
                self.num_assistant_tokens = max(1, self.num_assistant_tokens - 1)
        if (is_sklearn_available() and self.assistant_generation_config.assistant_confidence_threshold
                and type(self) is AssistedCandidateGenerator):
            # [1] * num_matches: list repetition takes num_matches.__index__()
            self.matches.extend([1] * num_matches)
            if len(self.probs) > len(self.matches):
                self.matches.append(0)
            excess_length = len(self.probs) - len(self.matches)
            if excess_length > 0:
                del self.probs[-excess_length:]
            if len(self.probs) > 5 and {0, 1}.issubset(self.matches):
                fpr, tpr, thresholds = roc_curve(self.matches, self.probs)
                self.assistant_generation_config.assistant_confidence_threshold = thresholds[-1]

    def _calculate_new_tokens(self, input_ids):
        new_cur_len = input_ids.shape[-1]
        max_new_tokens = min(int(self.num_assistant_tokens), self.main_model_max_length - new_cur_len - 1)
        min_new_tokens = max(min(max_new_tokens, self.main_model_min_length - new_cur_len), 0)
        return min_new_tokens, max_new_tokens

    def _update_past_and_masks(self, input_ids, remove_from_pkv=0, num_added_tokens=1):
        has_past_key_values = self.assistant_kwargs.get("past_key_values", None) is not None
        if has_past_key_values:
            new_cache_size = input_ids.shape[-1] - 1 - remove_from_pkv
            self.assistant_kwargs["past_key_values"].crop(new_cache_size - num_added_tokens)
            self.assistant_kwargs = _prepare_attention_mask(
                self.assistant_kwargs, input_ids.shape[-1], self.assistant_model.config.is_encoder_decoder)
            self.assistant_kwargs = _prepare_position_ids(
                self.assistant_kwargs, input_ids.shape[-1], self.assistant_model.config.is_encoder_decoder)
            self.assistant_kwargs = _prepare_token_type_ids(self.assistant_kwargs, input_ids.shape[-1])
            self.generation_config.cache_implementation = None
        return has_past_key_values

    def _prepare_generation_args(self, input_ids, min_new_tokens, max_new_tokens):
        return {
            self.input_ids_key: input_ids,
            "min_new_tokens": min_new_tokens,
            "max_new_tokens": max_new_tokens,
            "generation_config": self.generation_config,
            "logits_processor": self.logits_processor,
        }

    def _generate_candidates(self, generation_args):
        assistant_output = self.assistant_model.generate(**generation_args, **self.assistant_kwargs)
        self.assistant_kwargs["past_key_values"] = assistant_output.past_key_values
        if (is_sklearn_available() and self.assistant_generation_config.assistant_confidence_threshold
                and type(self) is AssistedCandidateGenerator):
            # torch.cat(scores), softmax, p = scores_softmax[range(len(ids)), ids]; p.tolist()
            simtorch.DEV.k("cat")
            simtorch.DEV.k("softmax")
            simtorch.DEV.k("index")
            n = len(assistant_output.scores)
            p = Tensor([0.9] * n, (n,))
            self.probs.extend(p.tolist())
        # torch.stack(assistant_output.scores, dim=1)
        simtorch.DEV.k("cat")
        n = len(assistant_output.scores)
        candidate_logits = Tensor(list(assistant_output.scores), (1, n, simtorch.VOCAB))
        candidate_ids = assistant_output.sequences
        return candidate_ids, candidate_logits


def _prepare_attention_mask(model_kwargs, new_length, is_encoder_decoder):
    """Grows (torch.cat with new_ones) or slices the attention mask to new_length."""
    mask_key = "decoder_attention_mask" if is_encoder_decoder else "attention_mask"
    if mask_key not in model_kwargs:
        return model_kwargs
    mask = model_kwargs[mask_key]
    mask_length_diff = new_length - mask.shape[1]
    if mask_length_diff < 0:
        model_kwargs[mask_key] = Tensor(new_length, (1, new_length))  # mask[:, :diff], a view
    elif mask_length_diff > 0:
        ones = simtorch.full((1, mask_length_diff), 1)
        model_kwargs[mask_key] = simtorch.cat([mask, ones], new_length)
        model_kwargs[mask_key].shape = (1, new_length)
    return model_kwargs


def _prepare_position_ids(model_kwargs, new_length, is_encoder_decoder):
    """Extends position_ids (last + arange, torch.cat) or slices them to new_length."""
    key = "decoder_position_ids" if is_encoder_decoder else "position_ids"
    if model_kwargs.get(key) is None:
        return model_kwargs
    positions = model_kwargs[key]
    diff = new_length - positions.shape[1]
    if diff < 0:
        model_kwargs[key] = Tensor(new_length, (1, new_length))
    elif diff > 0:
        simtorch.DEV.k("fill")  # torch.arange(1, diff + 1)
        simtorch.DEV.k("binary")  # positions[:, -1:] + arange
        model_kwargs[key] = simtorch.cat([positions], new_length)
        model_kwargs[key].shape = (1, new_length)
    return model_kwargs


def _prepare_token_type_ids(model_kwargs, new_length):
    if "token_type_ids" not in model_kwargs or model_kwargs["token_type_ids"] is None:
        return model_kwargs
    return model_kwargs
