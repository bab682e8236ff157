"""Mirrors sglang/srt/speculative/eagle_info.py (EagleVerifyInput, EagleDraftInput,
EagleVerifyOutput). `EagleVerifyInput.verify` is the ACCEPT phase: the greedy tree-verify kernel
and then the blocking copy of the accept lengths to the host (`.tolist()`), where the CPU waits
for the whole target forward."""

import ctypes

from fakecuda import tag


class EagleDraftInput(object):
    def __init__(self, gpu, accept_length_per_req_cpu=None):
        self.gpu = gpu
        self.accept_length_per_req_cpu = accept_length_per_req_cpu or []

    def prepare_extend_after_decode(self, batch, speculative_num_steps):
        # create_extend_after_decode_spec_info (triton) over the accepted tokens.
        self.gpu.launch("create_extend_after_decode_spec_info", batch.batch_size())


class EagleVerifyOutput(object):
    def __init__(self, draft_input, logits_output, accept_length_per_req_cpu):
        self.draft_input = draft_input
        self.logits_output = logits_output
        self.accept_length_per_req_cpu = accept_length_per_req_cpu


class EagleVerifyInput(object):
    def __init__(self, gpu, batch_size, draft_token_num, spec_steps, topk, accept_src,
                 expected=None):
        self.gpu = gpu
        self.batch_size = batch_size
        self.draft_token_num = draft_token_num
        self.spec_steps = spec_steps
        self.topk = topk
        # Device address of this cycle's accept lengths (int32 per request), and what they are
        # (written there at startup: the simulated verify kernel computes nothing).
        self.accept_src = accept_src
        self.expected = expected

    def prepare_for_verify(self, batch, page_size):
        # assign_req_to_token_pool (triton): KV slots for the draft tokens.
        self.gpu.launch("assign_req_to_token_pool", batch.batch_size())

    def verify(self, batch, logits_output, token_to_kv_pool_allocator, page_size,
               vocab_mask=None):
        with tag("spec.accept"):
            bs = batch.batch_size()
            self.gpu.launch("verify_tree_greedy", bs)
            accept_length = (ctypes.c_int32 * bs)()
            self.gpu.blocking_dtoh(accept_length, self.accept_src, generic=True)  # .tolist()
            accept_length_per_req_cpu = list(accept_length)
            if self.expected is not None and accept_length_per_req_cpu != self.expected:
                raise RuntimeError(
                    "EagleVerifyInput.verify: accept lengths read back from the device %r differ "
                    "from the ones written there %r" % (accept_length_per_req_cpu, self.expected))
            for req, n in zip(batch.reqs, accept_length_per_req_cpu):
                req.output_len += n + 1  # accepted drafts + the bonus token
            draft_input = EagleDraftInput(self.gpu, accept_length_per_req_cpu)
            return EagleVerifyOutput(draft_input, logits_output, accept_length_per_req_cpu)
