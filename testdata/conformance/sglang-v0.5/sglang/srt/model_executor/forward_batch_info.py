"""Mirrors sglang/srt/model_executor/forward_batch_info.py (ForwardMode, ForwardBatch)."""


class ForwardMode(object):
    EXTEND = 1
    DECODE = 2
    TARGET_VERIFY = 3
    DRAFT_EXTEND = 4

    @staticmethod
    def is_extend(mode):
        return mode == ForwardMode.EXTEND


class ForwardBatch(object):
    def __init__(self, forward_mode, batch_size, num_tokens, spec_info=None):
        self.forward_mode = forward_mode
        self.batch_size = batch_size
        self.num_tokens = num_tokens
        self.spec_info = spec_info

    @classmethod
    def init_new(cls, batch, model_runner):
        return cls(batch.forward_mode, batch.batch_size, batch.num_tokens, batch.spec_info)
