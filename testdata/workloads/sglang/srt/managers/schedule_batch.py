"""Mirrors sglang/srt/managers/schedule_batch.py (Req, ScheduleBatch, ModelWorkerBatch)."""

from fakecuda import tag
from sglang.srt.model_executor.forward_batch_info import ForwardMode


class Req(object):
    def __init__(self, rid, prompt_len):
        self.rid = rid
        self.origin_input_len = prompt_len
        self.output_len = 0

    def seqlen(self):
        return self.origin_input_len + self.output_len


class ModelWorkerBatch(object):
    __slots__ = ("forward_mode", "batch_size", "num_tokens", "spec_info")

    def __init__(self, forward_mode, batch_size, num_tokens, spec_info):
        self.forward_mode = forward_mode
        self.batch_size = batch_size
        self.num_tokens = num_tokens
        self.spec_info = spec_info


class ScheduleBatch(object):
    def __init__(self, reqs):
        self.reqs = reqs
        self.forward_mode = ForwardMode.DECODE
        self.spec_info = None

    @classmethod
    def init_new(cls, batch_size, prompt_len):
        return cls([Req("req-%d" % i, prompt_len) for i in range(batch_size)])

    def batch_size(self):
        return len(self.reqs)

    def seq_lens_sum(self):
        return sum(r.seqlen() for r in self.reqs)

    def prepare_for_decode(self):
        with tag("sched.batch"):
            # As in SGLang: with EAGLE the decode batch is prepared by the draft worker.
            return

    def get_model_worker_batch(self):
        bs = len(self.reqs)
        num_tokens = bs
        if self.forward_mode == ForwardMode.TARGET_VERIFY:
            num_tokens = bs * self.spec_info.draft_token_num
        return ModelWorkerBatch(self.forward_mode, bs, num_tokens, self.spec_info)
