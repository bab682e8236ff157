"""Mirrors sglang/srt/managers/schedule_batch.py (Req, ScheduleBatch, ModelWorkerBatch)."""

from sglang.srt.model_executor.forward_batch_info import ForwardMode


class Req(object):
    def __init__(self, rid):
        self.rid = rid
        self.output_ids = []


class ModelWorkerBatch(object):
    def __init__(self, forward_mode, batch_size, num_tokens, spec_info):
        self.forward_mode = forward_mode
        self.batch_size = batch_size
        self.num_tokens = num_tokens
        self.spec_info = spec_info


class ScheduleBatch(object):
    def __init__(self, reqs, gpu):
        self.reqs = reqs
        self.gpu = gpu
        self.forward_mode = ForwardMode.EXTEND
        self.spec_info = None
        self.extend_num_tokens = 0

    @classmethod
    def init_new(cls, reqs, gpu):
        return cls(reqs, gpu)

    def batch_size(self):
        return len(self.reqs)

    def prepare_for_extend(self):
        # input_ids / seq_lens / out_cache_loc to the device, then write_req_to_token_pool_triton
        self.extend_num_tokens = 16 * len(self.reqs)
        self.gpu.launch("write_req_to_token_pool", len(self.reqs))

    def prepare_for_decode(self):
        self.forward_mode = ForwardMode.DECODE
        # spec v2: the decode allocation runs here, before the forward (eagle_prepare_for_decode)
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode
        eagle_prepare_for_decode(self)

    def get_model_worker_batch(self):
        bs = len(self.reqs)
        if self.forward_mode == ForwardMode.EXTEND:
            n = self.extend_num_tokens
        elif self.forward_mode == ForwardMode.TARGET_VERIFY:
            n = bs * self.spec_info.draft_token_num
        elif self.forward_mode == ForwardMode.DRAFT_EXTEND:
            n = bs * self.spec_info.num_tokens_per_req
        else:
            n = bs * max(1, getattr(self.spec_info, "num_tokens_per_req", 1) or 1)
        return ModelWorkerBatch(self.forward_mode, bs, n, self.spec_info)
