"""transformers/generation/utils.py (5.x): GenerationMixin.generate (decorated with
@torch.no_grad()) dispatches through GENERATION_MODES_MAPPING to _assisted_decoding, whose
while loop runs one speculative cycle per iteration:

  1. candidate_generator.get_candidates      draft (a nested generate of the assistant)
  2. self(**model_inputs)                    verify: the target forward, called directly
  3. _speculative_sampling (do_sample)       accept; greedy: an inline match with no frame
  4. outputs.past_key_values.crop(...)       kv rollback (slicing: no CUDA work)
  5. update_candidate_strategy               strategy
  then _update_model_kwargs_for_generation and the stopping criteria, and the loop condition
  (_has_unfinished_sequences), whose `elif this_peer_finished` copies a device bool back.

Ground truth: every block of the loop body runs under fakecuda.tag(truth_tag(phase, cycle)):
the phase is what the code is doing, the cycle the loop iteration (simtorch.next_cycle).
The tags are the oracle only; they add no Python frames.
"""

import copy

import simtorch
from fakecuda import tag, truth_tag
from simtorch import Ids, Tensor, no_grad

from ..cache_utils import DynamicCache
from .candidate_generator import (
    AssistedCandidateGenerator,
    _prepare_attention_mask,
    _prepare_position_ids,
    _prepare_token_type_ids,
)
from .configuration_utils import GenerationConfig
from .logits_process import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper
from .stopping_criteria import ConfidenceCriteria, EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList

GENERATION_MODES_MAPPING = {
    "sample": "_sample",
    "greedy_search": "_sample",
    "assisted_generation": "_assisted_decoding",
}


class GenerateDecoderOnlyOutput(object):
    def __init__(self, sequences, scores=None, past_key_values=None):
        self.sequences = sequences
        self.scores = scores
        self.past_key_values = past_key_values


class GenerationMixin(object):
    def _supports_logits_to_keep(self):
        return True

    def _prepare_special_tokens(self, generation_config, kwargs_has_attention_mask=None, device=None):
        def _tensor_or_none(token):
            if token is None:
                return None
            return simtorch.tensor(token)  # torch.tensor(token, device=device, dtype=torch.long)

        bos_token_tensor = _tensor_or_none(generation_config.bos_token_id)
        eos_token_tensor = _tensor_or_none(generation_config.eos_token_id)
        pad_token_tensor = _tensor_or_none(generation_config.pad_token_id)
        if pad_token_tensor is None and eos_token_tensor is not None:
            pad_token_tensor = eos_token_tensor  # eos_token_tensor[0]: a view
        # sanity warnings: each condition is a device bool copied back
        if eos_token_tensor is not None and simtorch.any_(eos_token_tensor < 0):
            pass
        if eos_token_tensor is not None and simtorch.any_(eos_token_tensor == pad_token_tensor):
            pass
        generation_config._bos_token_tensor = bos_token_tensor
        generation_config._eos_token_tensor = eos_token_tensor
        generation_config._pad_token_tensor = pad_token_tensor

    def _prepare_position_ids_for_generation(self, inputs_tensor, model_kwargs):
        # attention_mask.long().cumsum(-1) - 1; masked_fill_(attention_mask == 0, 1)
        for kind in ("copy", "scan", "binary", "compare", "binary"):
            simtorch.DEV.k(kind)
        n = inputs_tensor.shape[1]
        return Tensor(n, (1, n))

    def _get_logits_processor(self, generation_config, logits_processor=None):
        processors = LogitsProcessorList()
        if generation_config.do_sample:
            if generation_config.temperature is not None and generation_config.temperature != 1.0:
                processors.append(TemperatureLogitsWarper(generation_config.temperature))
            if generation_config.top_k is not None and generation_config.top_k != 0:
                processors.append(TopKLogitsWarper(generation_config.top_k))
        if logits_processor:
            processors.extend(logits_processor)
        return processors

    def _get_stopping_criteria(self, generation_config, stopping_criteria=None):
        criteria = StoppingCriteriaList()
        if generation_config.max_length is not None:
            criteria.append(MaxLengthCriteria(max_length=generation_config.max_length))
        if generation_config._eos_token_tensor is not None:
            criteria.append(EosTokenCriteria(eos_token_id=generation_config._eos_token_tensor))
        if (generation_config.is_assistant and generation_config.assistant_confidence_threshold is not None
                and generation_config.assistant_confidence_threshold > 0):
            criteria.append(ConfidenceCriteria(generation_config.assistant_confidence_threshold))
        return criteria

    def _get_candidate_generator(self, generation_config, input_ids, inputs_tensor, logits_processor,
                                 model_kwargs, assistant_model=None, target_tokenizer=None,
                                 assistant_tokenizer=None):
        return AssistedCandidateGenerator(
            input_ids=input_ids,
            assistant_model=assistant_model,
            generation_config=generation_config,
            model_kwargs=model_kwargs,
            inputs_tensor=inputs_tensor,
            logits_processor=logits_processor,
        )

    @no_grad()
    def generate(self, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
                 assistant_model=None, **kwargs):
        generation_mode_kwargs = {}
        if assistant_model is not None:
            generation_mode_kwargs["assistant_model"] = assistant_model
        generation_config = copy.copy(generation_config if generation_config is not None else self.generation_config)
        model_kwargs = {}
        for key, value in kwargs.items():
            if hasattr(generation_config, key):
                setattr(generation_config, key, value)
            else:
                model_kwargs[key] = value
        generation_mode = generation_config.get_generation_mode(assistant_model)
        # type() required to access the unbound class-level method
        decoding_method = getattr(type(self), GENERATION_MODES_MAPPING[generation_mode])

        # _prepare_model_inputs: the ids come as `inputs` or as the `input_ids` kwarg
        input_ids = inputs if inputs is not None else model_kwargs.pop("input_ids")
        if generation_mode == "assisted_generation":
            generation_mode_kwargs["inputs_tensor"] = input_ids
        self._prepare_special_tokens(generation_config, "attention_mask" in model_kwargs)
        if model_kwargs.get("position_ids") is None:
            model_kwargs["position_ids"] = self._prepare_position_ids_for_generation(input_ids, model_kwargs)
        if generation_config.max_new_tokens is not None:
            generation_config.max_length = input_ids.shape[1] + generation_config.max_new_tokens
        if self._supports_logits_to_keep() and "logits_to_keep" not in model_kwargs:
            model_kwargs["logits_to_keep"] = 1
        if model_kwargs.get("past_key_values") is None:
            # _prepare_cache_for_generation: a DynamicCache (no device memory until used)
            model_kwargs["past_key_values"] = DynamicCache(config=self.config)
        prepared_logits_processor = self._get_logits_processor(generation_config, logits_processor)
        prepared_stopping_criteria = self._get_stopping_criteria(generation_config, stopping_criteria)
        model_kwargs["use_cache"] = generation_config.use_cache

        result = decoding_method(
            self,
            input_ids,
            logits_processor=prepared_logits_processor,
            stopping_criteria=prepared_stopping_criteria,
            generation_config=generation_config,
            **generation_mode_kwargs,
            **model_kwargs,
        )
        return result

    def _has_unfinished_sequences(self, this_peer_finished, synced_gpus, device=None):
        if synced_gpus:
            raise NotImplementedError("synced_gpus is not mirrored")
        elif this_peer_finished:
            return False
        return True

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, past_key_values=None,
                                      attention_mask=None, is_first_iteration=False, **kwargs):
        model_inputs = {}
        if next_sequence_length is not None:
            input_ids = input_ids[:, -next_sequence_length:]
        model_inputs["input_ids"] = input_ids.clone()  # clone(memory_format=torch.contiguous_format)
        model_inputs["input_ids"] = Ids(input_ids.host)
        sequence_length = input_ids.shape[1]
        if past_key_values is not None:
            model_inputs["past_key_values"] = past_key_values
        position_ids = kwargs.pop("position_ids", None)
        if position_ids is not None:
            total = position_ids.shape[1]
            if total != sequence_length:
                simtorch.DEV.k("copy")  # position_ids[..., -sequence_length:].clone()
            model_inputs["position_ids"] = Tensor(list(range(total - sequence_length, total)),
                                                  (1, sequence_length))
        if attention_mask is not None:
            model_inputs["attention_mask"] = attention_mask
        for key, value in kwargs.items():
            if key not in model_inputs and key != "next_sequence_length":
                model_inputs[key] = value
        return model_inputs

    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, is_encoder_decoder=False,
                                            num_new_tokens=1):
        model_kwargs["past_key_values"] = outputs.past_key_values
        if "attention_mask" in model_kwargs:
            attention_mask = model_kwargs["attention_mask"]
            ones = simtorch.full((attention_mask.shape[0], 1), 1)  # attention_mask.new_ones
            n = attention_mask.shape[1] + 1
            model_kwargs["attention_mask"] = simtorch.cat([attention_mask, ones], n)
            model_kwargs["attention_mask"].shape = (1, n)
        if model_kwargs.get("position_ids") is not None:
            # the positions of the num_new_tokens new tokens: last + arange, then torch.cat
            position_ids = model_kwargs["position_ids"]
            simtorch.DEV.k("fill")
            simtorch.DEV.k("binary")
            added = num_new_tokens.host if isinstance(num_new_tokens, Tensor) else num_new_tokens
            n = position_ids.shape[1] + added
            model_kwargs["position_ids"] = simtorch.cat([position_ids], n)
            model_kwargs["position_ids"].shape = (1, n)
        return model_kwargs

    def _prefill(self, input_ids, generation_config, model_kwargs, is_first_iteration=True):
        next_sequence_length = None
        cache = model_kwargs.get("past_key_values")
        if cache is not None:
            past_length = cache.get_seq_length()
            attention_mask = model_kwargs.get("attention_mask")
            if attention_mask is not None and input_ids.shape[1] == attention_mask.shape[1]:
                next_sequence_length = input_ids.shape[1] - past_length
        model_inputs = self.prepare_inputs_for_generation(
            input_ids, next_sequence_length=next_sequence_length, is_first_iteration=is_first_iteration,
            **model_kwargs)
        return self(**model_inputs, return_dict=True)

    def _sample(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                streamer=None, **model_kwargs):
        pad_token_id = generation_config._pad_token_tensor
        output_scores = generation_config.output_scores
        return_dict_in_generate = generation_config.return_dict_in_generate
        has_eos_stopping_criteria = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
        do_sample = generation_config.do_sample
        scores = () if (return_dict_in_generate and output_scores) else None

        batch_size = input_ids.shape[0]
        this_peer_finished = False
        unfinished_sequences = simtorch.full((batch_size,), 1)  # torch.ones(batch_size, device=...)
        model_forward = self.__call__

        prefill_consumed = False
        outputs = self._prefill(input_ids, generation_config, model_kwargs,
                                is_first_iteration=not generation_config.is_assistant)

        while self._has_unfinished_sequences(this_peer_finished, synced_gpus, device=None):
            if prefill_consumed:
                next_sequence_length = 1 if model_kwargs["use_cache"] else None
                model_inputs = self.prepare_inputs_for_generation(
                    input_ids, next_sequence_length=next_sequence_length, **model_kwargs)
                outputs = model_forward(**model_inputs, return_dict=True)
            prefill_consumed = True
            model_kwargs = self._update_model_kwargs_for_generation(outputs, model_kwargs)

            # outputs.logits[:, -1].to(copy=True, dtype=torch.float32)
            next_token_logits = outputs.logits.to(copy=True, dtype="float32")
            next_token_scores = logits_processor(input_ids, next_token_logits)
            if return_dict_in_generate and output_scores:
                scores += (next_token_scores.host[-1],)

            if do_sample:
                simtorch.DEV.k("softmax")  # nn.functional.softmax(next_token_scores, dim=-1)
                simtorch.DEV.k("multinomial")  # torch.multinomial(probs, num_samples=1)
            else:
                simtorch.DEV.k("reduce")  # torch.argmax(next_token_scores, dim=-1)
            next_tokens = Ids([next_token_scores.host[-1]])

            if has_eos_stopping_criteria:
                # next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)
                simtorch.DEV.k("binary", 4)

            input_ids = simtorch.cat_ids([input_ids, next_tokens])
            unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids, scores)
            simtorch.DEV.k("reduce")  # unfinished_sequences.max() == 0
            this_peer_finished = unfinished_sequences == 0
            del outputs

        if return_dict_in_generate:
            return GenerateDecoderOnlyOutput(sequences=input_ids, scores=scores,
                                             past_key_values=model_kwargs.get("past_key_values"))
        return input_ids

    def _assisted_decoding(self, input_ids, logits_processor, stopping_criteria, generation_config,
                           synced_gpus=False, streamer=None, inputs_tensor=None, assistant_model=None,
                           assistant_tokenizer=None, tokenizer=None, **model_kwargs):
        if not model_kwargs["use_cache"]:
            raise ValueError("assisted generate requires `use_cache=True`")
        candidate_generator = self._get_candidate_generator(
            generation_config=generation_config,
            input_ids=input_ids,
            inputs_tensor=inputs_tensor,
            assistant_model=assistant_model,
            logits_processor=logits_processor,
            target_tokenizer=tokenizer,
            assistant_tokenizer=assistant_tokenizer,
            model_kwargs=model_kwargs,
        )
        do_sample = generation_config.do_sample
        return_dict_in_generate = generation_config.return_dict_in_generate
        output_scores = generation_config.output_scores
        scores = () if (return_dict_in_generate and output_scores) else None

        batch_size, cur_len = input_ids.shape[:2]
        if batch_size > 1:
            raise ValueError("assisted generate is only supported for batch_size = 1")
        # Before the loop: set-up work of the cycle function that belongs to no cycle.
        with tag(truth_tag("spec.cycle_other")):
            unfinished_sequences = simtorch.full((batch_size,), 1)  # torch.ones(batch_size)

        this_peer_finished = False
        is_first_iteration = True
        cycle = None  # truth: the cycle whose stop check the loop condition makes
        while True:
            with tag(truth_tag("spec.cycle_other", cycle)):
                if not self._has_unfinished_sequences(this_peer_finished, synced_gpus, device=None):
                    break
            cycle = simtorch.next_cycle()
            cur_len = input_ids.shape[1]

            # 1. Fetch candidate sequences from the candidate generator
            with tag(truth_tag("spec.draft", cycle)):
                candidate_input_ids, candidate_logits = candidate_generator.get_candidates(input_ids)
            with tag(truth_tag("spec.cycle_other", cycle)):
                candidate_input_ids = candidate_input_ids.to("cuda")  # same device: no copy
                if candidate_logits is not None:
                    candidate_logits = candidate_logits.to("cuda")
                candidate_length = candidate_input_ids.shape[1] - input_ids.shape[1]
                is_done_candidate = stopping_criteria(candidate_input_ids, None)

                # 2.1. Prepare the target's inputs
                candidate_kwargs = copy.copy(model_kwargs)
                candidate_kwargs = _prepare_attention_mask(candidate_kwargs, candidate_input_ids.shape[1], False)
                candidate_kwargs = _prepare_token_type_ids(candidate_kwargs, candidate_input_ids.shape[1])
                position_ids = candidate_kwargs.get("position_ids")
                if position_ids is not None and candidate_length > 0:
                    new_length = candidate_length + position_ids.shape[-1]
                    candidate_kwargs = _prepare_position_ids(candidate_kwargs, new_length, False)
                next_sequence_length = candidate_length + 1 if not is_first_iteration else None
                model_inputs = self.prepare_inputs_for_generation(
                    candidate_input_ids, next_sequence_length=next_sequence_length,
                    is_first_iteration=is_first_iteration, **candidate_kwargs)
                if "logits_to_keep" in model_inputs:
                    model_inputs["logits_to_keep"] = candidate_length + 1

            # 2.2. The target forward on the candidates
            with tag(truth_tag("spec.verify", cycle)):
                outputs = self(**model_inputs)

            with tag(truth_tag("spec.cycle_other", cycle)):
                # 2.3. outputs.logits[:, -candidate_length - 1:].to(torch.float32); clone
                new_logits = outputs.logits.to(dtype="float32")
                next_token_logits = new_logits.clone()
                if len(logits_processor) > 0:
                    for i in range(candidate_length + 1):
                        logits_processor(candidate_input_ids[:, : cur_len + i], new_logits)
                        simtorch.DEV.k("copy")  # new_logits[:, i, :] = ...

                # 3. Select the accepted tokens
                if do_sample and candidate_logits is not None:
                    with tag(truth_tag("spec.accept", cycle)):
                        valid_tokens, n_matches = _speculative_sampling(
                            candidate_input_ids, candidate_logits, candidate_length, new_logits,
                            is_done_candidate)
                else:
                    # the inline match: no frame of its own, so the preset counts it as the
                    # loop's own work (spec.cycle_other)
                    if do_sample:
                        simtorch.DEV.k("softmax")
                        simtorch.DEV.k("multinomial")
                    else:
                        simtorch.DEV.k("reduce")  # new_logits.argmax(dim=-1)
                    selected_tokens = Ids(new_logits.host)
                    candidate_new_tokens = candidate_input_ids[:, cur_len:]
                    # ((~(candidate_new_tokens == selected_tokens[:, :-1])).cumsum(dim=-1) < 1).sum()
                    for kind in ("compare", "binary", "scan", "compare", "reduce"):
                        simtorch.DEV.k(kind)
                    matches = 0
                    for a, b in zip(candidate_new_tokens.host, selected_tokens.host):
                        if a != b:
                            break
                        matches += 1
                    n_matches = Tensor(matches)
                    if is_done_candidate and n_matches == candidate_length:
                        n_matches = n_matches - 1
                    valid_tokens = selected_tokens[:, : n_matches + 1]

                # 4.1. The valid continuation
                input_ids = simtorch.cat_ids([input_ids, valid_tokens])
                new_cur_len = input_ids.shape[1]

            # 4.2. Discard the target's cache entries of rejected candidates
            with tag(truth_tag("spec.kv_rollback", cycle)):
                outputs.past_key_values.crop(new_cur_len - 1)

            # 5. Update the candidate generation strategy
            with tag(truth_tag("spec.strategy", cycle)):
                candidate_generator.update_candidate_strategy(input_ids, new_logits, n_matches)

            with tag(truth_tag("spec.cycle_other", cycle)):
                model_kwargs = self._update_model_kwargs_for_generation(
                    outputs, model_kwargs, is_encoder_decoder=False, num_new_tokens=n_matches + 1)
                if return_dict_in_generate and output_scores:
                    scores += tuple(new_logits.host)
                unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids, scores)
                simtorch.DEV.k("reduce")  # unfinished_sequences.max() == 0
                this_peer_finished = unfinished_sequences == 0
                is_first_iteration = False
            del next_token_logits

        if return_dict_in_generate:
            return GenerateDecoderOnlyOutput(sequences=input_ids, scores=scores,
                                             past_key_values=model_kwargs.get("past_key_values"))
        return input_ids


def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                          is_done_candidate, assistant_ensemble_weight=None):
    """Algorithm 1 of https://huggingface.co/papers/2211.17192, as upstream: softmaxes, gathers,
    the ratio, rand_like and the cumsum on the device; `is_done_candidate and ...`, `n_matches <
    gamma` and `n_matches > 0` are device values copied back."""
    new_candidate_input_ids = candidate_input_ids[:, -candidate_length:]
    for kind in ("softmax", "index", "softmax", "index", "binary"):  # q, q_i, p, p_i, p_i / q_i
        simtorch.DEV.k(kind)
    simtorch.DEV.k("rand")  # r_i = torch.rand_like(probability_ratio)
    for kind in ("compare", "binary", "scan", "compare", "reduce"):  # is_accepted, n_matches
        simtorch.DEV.k(kind)
    # The toy target puts (almost) all its probability on its own token: a draft token is
    # accepted when it is that token, and the replacement is the target's token.
    target = new_logits.host
    matches = 0
    for a, b in zip(new_candidate_input_ids.host, target):
        if a != b:
            break
        matches += 1
    n_matches = Tensor(matches)
    if is_done_candidate and n_matches == candidate_length:
        n_matches = n_matches - 1
        valid_tokens = new_candidate_input_ids[:, : n_matches + 1]
    else:
        gamma = candidate_logits.shape[1]
        simtorch.DEV.k("index")  # p_n_plus_1 = p[:, n_matches, :]
        if n_matches < gamma:
            simtorch.DEV.k("index")  # q_n_plus_1 = q[:, n_matches, :]
            for kind in ("binary", "binary", "reduce", "binary"):  # clamp(p - q), sum, div_
                simtorch.DEV.k(kind)
        simtorch.DEV.k("multinomial")  # torch.multinomial(p_prime, num_samples=1)
        t = Ids([target[matches]])
        if n_matches > 0:
            valid_tokens = simtorch.cat_ids([new_candidate_input_ids[:, :n_matches], t])
        else:
            valid_tokens = t
    return valid_tokens, n_matches
