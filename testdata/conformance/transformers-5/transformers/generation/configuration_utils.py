"""transformers/generation/configuration_utils.py (5.x): the fields assisted decoding reads;
_get_default_generation_params supplies num_assistant_tokens 20, schedule "constant",
assistant_confidence_threshold 0.4."""

import copy


class GenerationConfig(object):
    def __init__(self, **kwargs):
        self.max_new_tokens = None
        self.max_length = None
        self.min_length = None
        self.min_new_tokens = None
        self.do_sample = False
        self.temperature = None
        self.top_k = None
        self.bos_token_id = None
        self.eos_token_id = None
        self.pad_token_id = None
        self.num_assistant_tokens = None
        self.num_assistant_tokens_schedule = None
        self.assistant_confidence_threshold = None
        self.is_assistant = False
        self.return_dict_in_generate = False
        self.output_scores = False
        self.cache_implementation = None
        self.use_cache = True
        self.update(**kwargs)

    def update(self, defaults_only=False, **kwargs):
        for k, v in kwargs.items():
            if not defaults_only or getattr(self, k, None) is None:
                setattr(self, k, v)

    @staticmethod
    def _get_default_generation_params():
        return {"num_assistant_tokens": 20, "num_assistant_tokens_schedule": "constant",
                "assistant_confidence_threshold": 0.4}

    def get_generation_mode(self, assistant_model=None):
        if assistant_model is not None:
            return "assisted_generation"
        return "sample" if self.do_sample else "greedy_search"

    def copy(self):
        return copy.copy(self)
