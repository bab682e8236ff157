"""Mirrors sglang/srt/speculative/eagle_info.py (main): the spec-info dataclasses only; the v2
acceptance is the module function eagle_utils.eagle_sample."""


class EagleDraftInput(object):
    def __init__(self, bonus_tokens=None):
        self.bonus_tokens = bonus_tokens
        self.num_tokens_per_req = 1


class EagleDraftExtendInput(object):
    def __init__(self, num_tokens_per_req=1):
        self.num_tokens_per_req = num_tokens_per_req


class EagleVerifyInput(object):
    def __init__(self, draft_token_num, spec_steps):
        self.draft_token_num = draft_token_num
        self.spec_steps = spec_steps
        self.num_tokens_per_req = draft_token_num

    def is_verify_input(self):
        return True
