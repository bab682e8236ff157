"""Mirrors sglang/srt/speculative/eagle_info.py (v0.5): EagleVerifyInput (prepare_for_verify,
verify = acceptance), EagleDraftInput (prepare_for_extend, prepare_extend_after_decode).

EagleVerifyInput.verify runs the tree-verify kernel, then copies the accepted indices and
predictions to the host (`accept_index.tolist()`, `predict.tolist()`: the first blocking copy
waits for the whole target forward), appends the tokens to the requests, then
assign_req_to_token_pool and `accept_length.tolist()` (a second blocking copy)."""

import ctypes

from oracle import O, ph


class EagleDraftInput(object):
    def __init__(self, gpu, verified_id_len=1):
        self.gpu = gpu
        self.num_tokens_per_req = 1
        self.accept_length_cpu = None

    def prepare_for_extend(self, batch):
        self.gpu.launch("create_extend_after_decode_spec_info", batch.batch_size())

    def prepare_extend_after_decode(self, batch, speculative_num_steps):
        self.gpu.launch("create_extend_after_decode_spec_info", batch.batch_size())


class EagleVerifyOutput(object):
    def __init__(self, draft_input, logits_output, accept_length_per_req_cpu):
        self.draft_input = draft_input
        self.logits_output = logits_output
        self.accept_length_per_req_cpu = accept_length_per_req_cpu
        self.accepted_indices = None


class EagleVerifyInput(object):
    def __init__(self, gpu, draft_token_num, spec_steps, accept_dev):
        self.gpu = gpu
        self.draft_token_num = draft_token_num
        self.spec_steps = spec_steps
        self.num_tokens_per_req = draft_token_num
        self.accept_dev = accept_dev

    def prepare_for_verify(self, batch, page_size):
        # batch.out_cache_loc = alloc_token_slots(...); assign_req_to_token_pool[(bs,)](...)
        self.gpu.launch("assign_req_to_token_pool", batch.batch_size())

    def verify(self, batch, logits_output, token_to_kv_pool_allocator, page_size, vocab_mask=None):
        with ph("spec.accept", O.cur):
            return self._verify(batch, logits_output)

    def _verify(self, batch, logits_output):
        gpu, bs = self.gpu, batch.batch_size()
        gpu.launch("verify_tree_greedy", bs)
        accept_index_cpu = (ctypes.c_int32 * (bs * (self.spec_steps + 1)))()
        gpu.blocking_dtoh(accept_index_cpu, self.accept_dev)  # accept_index.tolist()
        predict_cpu = (ctypes.c_int32 * (bs * self.draft_token_num))()
        gpu.blocking_dtoh(predict_cpu, self.accept_dev)  # predict.tolist()
        for req in batch.reqs:
            req.output_ids.append(0)
        gpu.launch("assign_req_to_token_pool", bs)
        accept_length = (ctypes.c_int32 * bs)()
        gpu.blocking_dtoh(accept_length, self.accept_dev)  # accept_length.tolist()
        accept_length_cpu = [min(int(x), self.spec_steps) for x in accept_length]
        draft_input = EagleDraftInput(gpu)
        draft_input.accept_length_cpu = accept_length_cpu
        return EagleVerifyOutput(draft_input, logits_output, accept_length_cpu)
