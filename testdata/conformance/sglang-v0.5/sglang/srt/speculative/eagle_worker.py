"""Mirrors sglang/srt/speculative/eagle_worker.py (spec v1, EAGLEWorker(TpModelWorker)).

One call of forward_batch_generation is one step: a prefill (forward_target_extend then
forward_draft_extend) or a decode cycle (draft -> verify -> forward_draft_extend_after_decode).
The truth tags follow the real call tree: every call belongs to the innermost of draft, verify,
EagleVerifyInput.verify (accept), forward_draft_extend_after_decode, forward_target_extend /
forward_draft_extend (prefill) that is running, else to the cycle function itself."""

import ctypes

from oracle import O, ph
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner
from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from sglang.srt.speculative.eagle_utils import build_tree_kernel_efficient, organize_draft_results
from sglang.srt.speculative.spec_utils import assign_draft_cache_locs, fast_topk, select_top_k_tokens


class EAGLEWorker(TpModelWorker):
    def __init__(self, server_args, gpu, target_worker):
        self.server_args = server_args
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.target_worker = target_worker
        self.page_size = 1
        self.token_to_kv_pool_allocator = None
        super(EAGLEWorker, self).__init__(server_args, gpu, server_args.draft_num_hidden_layers,
                                          is_draft_worker=True)
        self.accept_dev = gpu.cuda.alloc(4 * server_args.batch_size * (self.speculative_num_draft_tokens + 1))
        self.seq_lens_sum_dev = gpu.cuda.alloc(8)
        self.init_cuda_graphs()

    def init_cuda_graphs(self):
        self.cuda_graph_runner = None
        self.cuda_graph_runner_for_draft_extend = None
        if self.server_args.disable_cuda_graph:
            return
        if self.speculative_num_steps > 1:
            self.cuda_graph_runner = EAGLEDraftCudaGraphRunner(self)
        self.cuda_graph_runner_for_draft_extend = EAGLEDraftExtendCudaGraphRunner(self)

    @property
    def draft_model_runner(self):
        return self.model_runner

    def forward_batch_generation(self, batch):
        n = O.begin()
        try:
            with ph("spec.cycle_other", n):
                if ForwardMode.is_extend(batch.forward_mode):
                    logits_output, next_token_ids = self.forward_target_extend(batch)
                    self.forward_draft_extend(batch, logits_output, next_token_ids)
                    return GenerationBatchResult(logits_output=logits_output,
                                                 next_token_ids=next_token_ids,
                                                 num_accepted_tokens=0, can_run_cuda_graph=False)
                spec_info = self.draft(batch)
                logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify(batch, spec_info)
                self.forward_draft_extend_after_decode(batch)
                return GenerationBatchResult(
                    logits_output=logits_output,
                    num_accepted_tokens=sum(verify_output.accept_length_per_req_cpu),
                    accept_length_per_req_cpu=verify_output.accept_length_per_req_cpu,
                    can_run_cuda_graph=can_run_cuda_graph)
        finally:
            O.end()

    def forward_target_extend(self, batch):
        with ph("spec.prefill", O.cur):
            model_worker_batch = batch.get_model_worker_batch()
            batch_result = self.target_worker.forward_batch_generation(model_worker_batch)
            return batch_result.logits_output, batch_result.next_token_ids

    def _draft_preprocess_decode(self, batch):
        with ph("spec.draft", O.cur):
            assign_draft_cache_locs(self.gpu, batch.batch_size())
            # batch.seq_lens_sum = torch.sum(batch.seq_lens).item(): a reduction, a blocking copy
            self.gpu.launch("seq_lens_sum", batch.batch_size())
            self.gpu.blocking_dtoh(ctypes.c_int64(), self.seq_lens_sum_dev)

    def draft(self, batch):
        with ph("spec.draft", O.cur):
            self._draft_preprocess_decode(batch)
            spec_info = batch.spec_info
            spec_info.num_tokens_per_req = self.topk
            model_worker_batch = batch.get_model_worker_batch()
            forward_batch = ForwardBatch.init_new(model_worker_batch, self.draft_model_runner)
            can_cuda_graph = self.cuda_graph_runner and self.cuda_graph_runner.can_run(forward_batch)
            if can_cuda_graph:
                self.cuda_graph_runner.replay(forward_batch)
            else:
                # self.draft_attn_backend.init_forward_metadata(forward_batch)
                self.gpu.launch("seq_lens_sum", forward_batch.batch_size)
                self.draft_forward(forward_batch)
            build_tree_kernel_efficient(self.gpu, batch.batch_size())
            return EagleVerifyInput(self.gpu, self.speculative_num_draft_tokens,
                                    self.speculative_num_steps, self.accept_dev)

    def draft_forward(self, forward_batch):
        with ph("spec.draft", O.cur):
            for i in range(self.speculative_num_steps):
                select_top_k_tokens(self.gpu, i, forward_batch)
                if i == self.speculative_num_steps - 1:
                    break
                logits_output = self.draft_model_runner.forward(forward_batch, skip_attn_backend_init=True).logits_output
                fast_topk(self.gpu, logits_output.num_tokens)
            return organize_draft_results(self.gpu, forward_batch)

    def verify(self, batch, spec_info):
        with ph("spec.verify", O.cur):
            spec_info.prepare_for_verify(batch, self.page_size)
            batch.forward_mode = ForwardMode.TARGET_VERIFY
            batch.spec_info = spec_info
            model_worker_batch = batch.get_model_worker_batch()
            batch_result = self.target_worker.forward_batch_generation(model_worker_batch, is_verify=True)
            logits_output, can_run_cuda_graph = batch_result.logits_output, batch_result.can_run_cuda_graph
            res = spec_info.verify(batch, logits_output, self.token_to_kv_pool_allocator, self.page_size, None)
            # logits_output.next_token_logits[res.accepted_indices], hidden_states likewise
            self.gpu.launch("copy_next_token_ids", batch.batch_size())
            batch.forward_mode = ForwardMode.DECODE
            batch.spec_info = res.draft_input
            return logits_output, res, model_worker_batch, can_run_cuda_graph

    def forward_draft_extend(self, batch, logits_output, next_token_ids):
        with ph("spec.prefill", O.cur):
            batch.spec_info = EagleDraftInput(self.gpu)
            batch.spec_info.prepare_for_extend(batch)
            model_worker_batch = batch.get_model_worker_batch()
            forward_batch = ForwardBatch.init_new(model_worker_batch, self.draft_model_runner)
            logits_output = self.draft_model_runner.forward(forward_batch).logits_output
            self.capture_for_decode(logits_output, forward_batch.spec_info)

    def forward_draft_extend_after_decode(self, batch):
        with ph("spec.draft_extend", O.cur):
            batch.spec_info.num_tokens_per_req = self.speculative_num_steps + 1
            batch.spec_info.prepare_extend_after_decode(batch, self.speculative_num_steps)
            batch.forward_mode = ForwardMode.DRAFT_EXTEND
            model_worker_batch = batch.get_model_worker_batch()
            forward_batch = ForwardBatch.init_new(model_worker_batch, self.draft_model_runner)
            # forward_batch.seq_lens_sum = forward_batch.seq_lens_cpu.sum().item(): a CPU tensor
            runner = self.cuda_graph_runner_for_draft_extend
            if runner and runner.can_run(forward_batch):
                runner.replay(forward_batch)
            else:
                self.gpu.launch("seq_lens_sum", forward_batch.batch_size)  # init_forward_metadata
                logits_output = self.draft_model_runner.forward(forward_batch, skip_attn_backend_init=True).logits_output
                self.capture_for_decode(logits_output, forward_batch.spec_info)
            batch.forward_mode = ForwardMode.DECODE

    def capture_for_decode(self, logits_output, draft_input):
        fast_topk(self.gpu, logits_output.num_tokens)
