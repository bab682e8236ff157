"""Mirrors sglang/srt/speculative/multi_layer_eagle_worker_v2.py (main, --enable-multi-layer-eagle):
MultiLayerEagleDraftWorker and MultiLayerEagleWorkerV2. The draft model is a stack of MTP layers,
one ModelRunner per draft step. One call of MultiLayerEagleWorkerV2.forward_batch_generation is
one step: a prefill (target prefill + _draft_extend_for_prefill, which runs every MTP layer once)
or a decode cycle: draft -> verify (run_eagle_verify) -> on_publish -> _draft_extend_for_decode.
draft() runs no draft forward: it takes the proposal that the previous step's draft extend left
in spec_info (the topk=1 chain) and builds the verify tree. _draft_extend_for_decode extends every
MTP layer over the verified tokens and proposes the next step's drafts, step by step, through the
draft-extend graph runner (prepare, then replay(step) and a worker-side input_ids rotation per
step) or eagerly. Nothing in the cycle waits for the GPU."""

from oracle import O, ph
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker, EagleDraftWorkerBase
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
    run_eagle_verify,
)
from sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner import (
    MultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
    OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.multi_layer_eagle_utils import rotate_input_ids
from sglang.srt.speculative.spec_utils import fast_topk, select_top_k_tokens


class MultiLayerEagleDraftWorker(EagleDraftWorkerBase):
    def __init__(self, server_args, gpu, target_worker):
        self.server_args = server_args
        self.gpu = gpu
        self.target_worker = target_worker
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        if self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            raise ValueError("multi-layer EAGLE requires speculative_num_draft_tokens == "
                             "speculative_num_steps + 1, got %d and %d"
                             % (self.speculative_num_draft_tokens, self.speculative_num_steps))
        self._rebuild_topk1_chain_buffers()
        self.draft_worker = TpModelWorker(server_args, gpu, 1, is_draft_worker=True, is_multi_layer_eagle=True)
        self.draft_runner_list = self.draft_worker.model_runner_list
        self.draft_runner = self.draft_runner_list[0]
        # The single-CG runner needs a backend that rebuilds its metadata in the graph.
        self.draft_extend_metadata_captured_in_graph = server_args.enable_single_cg_draft
        cuda = gpu.cuda
        self._next_token_ids = cuda.alloc(8 * 64)
        self._next_token_ids_backup = cuda.alloc(8 * 64)
        self._topk_snap = (cuda.alloc(8 * 64), cuda.alloc(8 * 64))

    def mtp_model_runner(self, step):
        return self.draft_runner_list[step]

    def init_cuda_graphs(self):
        # Upstream: under draft_tp_context / speculative_moe_backend_context.
        super(MultiLayerEagleDraftWorker, self).init_cuda_graphs()

    def _capture_cuda_graphs(self):
        self.cuda_graph_runner = None  # multi-layer EAGLE has no draft-decode graph
        self.cuda_graph_runner_for_draft_extend = None
        if self.server_args.disable_cuda_graph:
            return
        if self.server_args.enable_single_cg_draft and self.draft_extend_metadata_captured_in_graph:
            self.cuda_graph_runner_for_draft_extend = OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner(self)
        else:
            self.cuda_graph_runner_for_draft_extend = MultiLayerEagleMultiStepDraftExtendCudaGraphRunner(self)

    def draft(self, batch):
        with ph("spec.draft", O.cur):
            draft_input = batch.spec_info
            forward_batch, _ = prepare_for_draft(
                draft_input, batch, self.cuda_graph_runner, self.draft_runner_list[0], self.topk,
                self.speculative_num_steps)
            self.draft_forward(forward_batch)
            return build_eagle_verify_input(batch, draft_input, self.speculative_num_steps,
                                            self.speculative_num_draft_tokens)

    def draft_forward(self, forward_batch):
        with ph("spec.draft", O.cur):
            # topk=1 chain: parents and score indices are the start-up constants, the draft
            # tokens are the topk_index the last draft extend produced; no kernel runs.
            if self._topk1_parents_prealloc is not None:
                return self._topk1_parents_prealloc, self._topk1_score_indices_prealloc, "topk_index"
            return self._draft_forward_organize(forward_batch)

    def _draft_forward_organize(self, forward_batch):
        with ph("spec.draft", O.cur):
            select_top_k_tokens(self.gpu, 0, forward_batch)
            return organize_draft_results(self.gpu, forward_batch)

    def draft_extend(self):
        pass

    def _draft_extend_for_prefill(self, batch, target_hidden_states, next_token_ids):
        with ph("spec.prefill", O.cur):
            batch.spec_info = EagleDraftExtendInput(1)
            forward_batch = ForwardBatch.init_new(batch.get_model_worker_batch(), self.draft_runner_list[0])
            rotate_input_ids(self.gpu, forward_batch.num_tokens)  # input_ids shifted, next_token_ids appended
            for step in range(self.speculative_num_steps):
                output = self.draft_runner_list[step].forward(forward_batch)
                fast_topk(self.gpu, output.logits_output.num_tokens)  # softmax + fast_topk
                rotate_input_ids(self.gpu, forward_batch.num_tokens)  # the step's top-1 appended
            self.gpu.launch("copy_next_token_ids", batch.batch_size())  # torch.cat(topk_p_list)
            self.gpu.launch("copy_next_token_ids", batch.batch_size())  # torch.cat(topk_index_list)
            return EagleDraftInput(bonus_tokens=next_token_ids)

    def _draft_extend_for_decode(self, batch, batch_result):
        with ph("spec.draft_extend", O.cur):
            gpu, bs = self.gpu, batch.batch_size()
            draft_extend_input = EagleDraftExtendInput(self.speculative_num_steps + 1)
            cgr = self.cuda_graph_runner_for_draft_extend
            forward_batch = prepare_for_draft_extend(draft_extend_input, batch, self.speculative_num_draft_tokens,
                                                     self.draft_runner_list[0], cgr)
            can_run_decode_cuda_graph = bool(cgr and cgr.can_run_graph(forward_batch))
            # next_token_ids_backup = batch_result.next_token_ids.clone()
            gpu.cuda.dtod_async(self._next_token_ids_backup, self._next_token_ids, 8 * bs, gpu.cur_stream)
            if can_run_decode_cuda_graph:
                cgr.prepare(forward_batch)
                for step in range(self.speculative_num_steps):
                    _out, ret_topk_p, ret_topk_index = cgr.replay(step)
                    if not cgr.rotates_in_graph:
                        # Per-step graphs share one pool: snapshot the step's top-k (.clone()).
                        gpu.cuda.dtod_async(self._topk_snap[0], self._next_token_ids, 4 * bs, gpu.cur_stream)
                        gpu.cuda.dtod_async(self._topk_snap[1], self._next_token_ids, 8 * bs, gpu.cur_stream)
                    if step < self.speculative_num_steps - 1 and not cgr.rotates_in_graph:
                        rotate_input_ids(gpu, cgr.raw_num_tokens)
            else:
                gpu.launch("spec_bookkeeping", bs)  # select_index = arange * n + accept_lens - 1
                for step in range(self.speculative_num_steps):
                    gpu.launch("seq_lens_sum", bs)  # draft_runner_list[step].attn_backend.init_forward_metadata
                    out = self.draft_runner_list[step].forward(forward_batch)
                    fast_topk(gpu, bs)  # softmax + fast_topk over the selected rows
                    rotate_input_ids(gpu, out.logits_output.num_tokens)
            gpu.launch("copy_next_token_ids", bs)  # torch.cat(ret_topk_p_list)
            gpu.launch("copy_next_token_ids", bs)  # torch.cat(ret_topk_index_list)


class MultiLayerEagleWorkerV2(BaseSpecWorker):
    def __init__(self, server_args, gpu, target_worker):
        self.server_args = server_args
        self.gpu = gpu
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self._target_worker = target_worker
        self._draft_worker = MultiLayerEagleDraftWorker(server_args, gpu, target_worker)

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        n = O.begin()
        try:
            with ph("spec.cycle_other", n):
                if ForwardMode.is_extend(batch.forward_mode):
                    # Target prefill
                    with ph("spec.prefill", n):
                        batch_output = self.target_worker.forward_batch_generation(batch)
                    if on_publish is not None:
                        on_publish("new_seq_lens")
                    batch_output.next_draft_input = self.draft_worker._draft_extend_for_prefill(
                        batch, None, batch_output.next_token_ids)
                    return batch_output
                verify_input = self.draft_worker.draft(batch)
                batch.spec_info = verify_input
                batch_output = self.verify(batch, grammar_barrier=grammar_barrier)
                # Publish before draft_extend so the fence is at verify-end.
                if on_publish is not None:
                    on_publish("new_seq_lens")
                self.draft_worker._draft_extend_for_decode(batch, batch_output)
                return batch_output
        finally:
            O.end()

    def verify(self, batch, grammar_barrier=None):
        with ph("spec.verify", O.cur):
            return run_eagle_verify(batch, self.target_worker, self.speculative_num_draft_tokens)
