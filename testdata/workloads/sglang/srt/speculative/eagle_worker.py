"""Mirrors sglang/srt/speculative/eagle_worker.py: EAGLEWorker, the spec v1 worker.

One call of `forward_batch_generation` on a decode batch is one speculative cycle:
    draft (K draft steps, one graph replay or eager draft_forward) -> build tree
    verify (target forward over K+1 tokens; accept = EagleVerifyInput.verify, blocking copy)
    forward_draft_extend_after_decode (draft KV catch-up over the accepted tokens)
Every phase function sets its oracle tag first (fakecuda.tag), so each driver call is labelled
with the phase specprof's sglang preset must report for it (innermost matching frame wins).
"""

import ctypes
import random
import struct

from fakecuda import tag
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.speculative.eagle_utils import (
    build_tree_kernel_efficient,
    organize_draft_results,
    select_top_k_tokens,
)


def simulated_accept_lengths(seed, num_cycles, batch_size, num_steps, accept_prob):
    """Accepted draft tokens per cycle and request: each of the K draft tokens is accepted with
    probability accept_prob until the first rejection, so accept length (+1 bonus token) lies in
    1..K+1. Deterministic for a seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(num_cycles):
        row = []
        for _ in range(batch_size):
            n = 0
            while n < num_steps and rng.random() < accept_prob:
                n += 1
            row.append(n)
        out.append(row)
    return out


class EAGLEWorker(TpModelWorker):
    def __init__(self, server_args, gpu, target_worker):
        self.server_args = server_args
        self.target_worker = target_worker
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.page_size = server_args.page_size
        self.token_to_kv_pool_allocator = None
        super(EAGLEWorker, self).__init__(server_args, gpu, server_args.draft_num_hidden_layers,
                                          is_draft_worker=True)
        self.draft_model_runner = self.model_runner
        self.verify_ct = 0
        self._init_simulated_accept(server_args)
        self.init_cuda_graphs()

    def _init_simulated_accept(self, sa):
        """The simulated verify kernel computes nothing: the accept lengths of every cycle are
        written to a device buffer now (one cuMemcpyHtoD) and read back, per cycle, by the
        blocking copy in EagleVerifyInput.verify."""
        bs = sa.batch_size
        self.accept_table = simulated_accept_lengths(
            sa.seed, sa.num_cycles, bs, self.speculative_num_steps, sa.accept_prob)
        flat = [n for row in self.accept_table for n in row]
        cuda = self.gpu.cuda
        self.accept_dev = cuda.alloc(max(4, 4 * len(flat)))
        if flat:
            cuda.htod(self.accept_dev, struct.pack("<%di" % len(flat), *flat))
        # --draft-sync: the `.item()` of _draft_preprocess_decode.
        self.seq_lens_sum_dev = cuda.alloc(8)
        self.seq_lens_sum_host = ctypes.c_int64()

    def init_cuda_graphs(self):
        """Capture the draft and draft-extend CUDA graphs (startup only)."""
        self.cuda_graph_runner = None
        self.cuda_graph_runner_for_draft_extend = None
        if self.server_args.disable_cuda_graph:
            return
        self.cuda_graph_runner = EAGLEDraftCudaGraphRunner(self)
        self.cuda_graph_runner_for_draft_extend = EAGLEDraftExtendCudaGraphRunner(self)

    # ---- one speculative cycle -----------------------------------------------------------------

    def forward_batch_generation(self, batch):
        with tag("spec.cycle_other"):
            spec_info = self.draft(batch)
            logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify(
                batch, spec_info)
            # Bookkeeping between the phases (the real worker updates req_to_token / spec_info
            # tensors here): one small kernel launched directly by this frame.
            self.gpu.launch("spec_bookkeeping", batch.batch_size())
            self.forward_draft_extend_after_decode(batch)
            return GenerationBatchResult(
                logits_output=logits_output,
                num_accepted_tokens=sum(verify_output.accept_length_per_req_cpu),
                accept_length_per_req_cpu=verify_output.accept_length_per_req_cpu,
                can_run_cuda_graph=can_run_cuda_graph,
            )

    # ---- DRAFT ---------------------------------------------------------------------------------

    def draft(self, batch):
        with tag("spec.draft"):
            bs = batch.batch_size()
            self._draft_preprocess_decode(batch)
            forward_batch = ForwardBatch(ForwardMode.DECODE, bs, bs * self.topk, batch.spec_info)
            can_cuda_graph = (self.cuda_graph_runner is not None
                              and self.cuda_graph_runner.can_run(forward_batch))
            if can_cuda_graph:
                parent_list, top_scores_index, draft_tokens = self.cuda_graph_runner.replay(
                    forward_batch)
            else:
                parent_list, top_scores_index, draft_tokens = self.draft_forward(forward_batch)
            build_tree_kernel_efficient(
                self.gpu, bs, None, parent_list, top_scores_index, draft_tokens, None,
                batch.seq_lens_sum(), self.topk, self.speculative_num_steps,
                self.speculative_num_draft_tokens)
            i = self.verify_ct % max(1, len(self.accept_table))
            expected = self.accept_table[i] if self.accept_table else None
            return EagleVerifyInput(self.gpu, bs, self.speculative_num_draft_tokens,
                                    self.speculative_num_steps, self.topk,
                                    self.accept_dev + 4 * bs * i, expected)

    def _draft_preprocess_decode(self, batch):
        with tag("spec.draft"):
            # assign_draft_cache_locs (triton): KV slots for the draft tokens.
            self.gpu.launch("assign_draft_cache_locs", batch.batch_size())
            if self.server_args.draft_sync:
                # torch.sum(batch.seq_lens).item(): a reduction and a blocking copy.
                self.gpu.launch("seq_lens_sum", batch.batch_size())
                self.gpu.blocking_dtoh(self.seq_lens_sum_host, self.seq_lens_sum_dev)

    def draft_forward(self, forward_batch):
        with tag("spec.draft"):
            return self._draft_forward_steps(forward_batch)

    def _draft_forward_steps(self, forward_batch):
        """The body of draft_forward; EAGLEDraftCudaGraphRunner captures it at startup (through
        this name, not through draft_forward, so that capture-time calls are `other`)."""
        gpu = self.gpu
        for i in range(self.speculative_num_steps):
            select_top_k_tokens(gpu, i, forward_batch)
            if i == self.speculative_num_steps - 1:
                break
            self.draft_model_runner.forward(forward_batch, skip_attn_backend_init=True)
            gpu.launch("fast_topk", forward_batch.batch_size)  # softmax + fast_topk
        return organize_draft_results(gpu, forward_batch)

    # ---- VERIFY (+ ACCEPT) ---------------------------------------------------------------------

    def verify(self, batch, spec_info):
        with tag("spec.verify"):
            self.gpu.launch_side("side_prefetch", batch.batch_size())
            spec_info.prepare_for_verify(batch, self.page_size)
            batch.forward_mode = ForwardMode.TARGET_VERIFY
            batch.spec_info = spec_info
            model_worker_batch = batch.get_model_worker_batch()
            logits_output, can_run_cuda_graph = self.target_worker.forward_batch_generation(
                model_worker_batch, is_verify=True)
            res = spec_info.verify(batch, logits_output, self.token_to_kv_pool_allocator,
                                   self.page_size, None)
            self.verify_ct += 1
            batch.forward_mode = ForwardMode.DECODE
            batch.spec_info = res.draft_input
            return logits_output, res, model_worker_batch, can_run_cuda_graph

    # ---- DRAFT-EXTEND --------------------------------------------------------------------------

    def forward_draft_extend_after_decode(self, batch):
        with tag("spec.draft_extend"):
            bs = batch.batch_size()
            batch.spec_info.prepare_extend_after_decode(batch, self.speculative_num_steps)
            forward_batch = ForwardBatch(ForwardMode.DRAFT_EXTEND, bs,
                                         bs * (self.speculative_num_steps + 1), batch.spec_info)
            runner = self.cuda_graph_runner_for_draft_extend
            if runner is not None and runner.can_run(forward_batch):
                runner.replay(forward_batch)
            else:
                logits_output, _ = self.draft_model_runner.forward(
                    forward_batch, skip_attn_backend_init=True)
                self.capture_for_decode(logits_output, forward_batch.spec_info)

    def capture_for_decode(self, logits_output, draft_input):
        with tag("spec.draft_extend"):
            self.gpu.launch("fast_topk", logits_output.num_tokens)  # softmax + fast_topk
