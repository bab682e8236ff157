"""Mirrors sglang/srt/speculative/eagle_worker_v2.py (main, spec v2): EagleDraftWorker and
EAGLEWorkerV2. One call of EAGLEWorkerV2.forward_batch_generation is one step: a prefill (target
prefill + _draft_extend_for_prefill) or a decode cycle (draft -> verify (run_eagle_verify) ->
on_publish -> _draft_extend_for_decode). No call of the cycle waits for the GPU: the scheduler
copies the results out afterwards and waits for them one loop iteration later."""

from oracle import O, ph
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker, EagleDraftWorkerBase
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_utils import organize_draft_results
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
    prepare_for_draft_extend,
    run_eagle_verify,
)
from sglang.srt.speculative.spec_utils import fast_topk, select_top_k_tokens


class EagleDraftWorker(EagleDraftWorkerBase):
    def __init__(self, server_args, gpu, target_worker):
        self.server_args = server_args
        self.gpu = gpu
        self.target_worker = target_worker
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self.draft_worker = TpModelWorker(server_args, gpu, server_args.draft_num_hidden_layers, is_draft_worker=True)
        self.draft_runner = self.draft_worker.model_runner

    def init_cuda_graphs(self):
        self._capture_cuda_graphs()

    def _capture_cuda_graphs(self):
        self.cuda_graph_runner = None
        self.cuda_graph_runner_for_draft_extend = None
        if self.server_args.disable_cuda_graph:
            return
        if self.speculative_num_steps > 1:
            self.cuda_graph_runner = EAGLEDraftCudaGraphRunner(self)
        self.cuda_graph_runner_for_draft_extend = EAGLEDraftExtendCudaGraphRunner(self)

    def draft(self, batch):
        with ph("spec.draft", O.cur):
            draft_input = batch.spec_info
            forward_batch, can_run_decode_cuda_graph = prepare_for_draft(
                draft_input, batch, self.cuda_graph_runner, self.draft_runner, self.topk, self.speculative_num_steps)
            if can_run_decode_cuda_graph:
                self.cuda_graph_runner.execute(forward_batch)
            else:
                self.gpu.launch("seq_lens_sum", forward_batch.batch_size)  # draft_attn_backend.init_forward_metadata
                self.draft_forward(forward_batch)
            return build_eagle_verify_input(batch, draft_input, self.speculative_num_steps,
                                            self.speculative_num_draft_tokens)

    def draft_forward(self, forward_batch):
        with ph("spec.draft", O.cur):
            for i in range(self.speculative_num_steps):
                select_top_k_tokens(self.gpu, i, forward_batch)
                if i == self.speculative_num_steps - 1:
                    break
                logits_output = self.draft_runner.forward(forward_batch).logits_output
                fast_topk(self.gpu, logits_output.num_tokens)
            return organize_draft_results(self.gpu, forward_batch)

    def _draft_extend_for_prefill(self, batch, target_hidden_states, next_token_ids):
        with ph("spec.prefill", O.cur):
            self.gpu.launch("copy_next_token_ids", batch.batch_size())  # shifted input_ids
            batch.spec_info = EagleDraftExtendInput(1)
            forward_batch = ForwardBatch.init_new(batch.get_model_worker_batch(), self.draft_runner)
            logits_output = self.draft_runner.forward(forward_batch).logits_output
            fast_topk(self.gpu, logits_output.num_tokens)  # renorm_draft_probs + fast_topk
            return EagleDraftInput(bonus_tokens=next_token_ids)

    def _draft_extend_for_decode(self, batch, batch_result):
        with ph("spec.draft_extend", O.cur):
            cuda_graph_runner = self.cuda_graph_runner_for_draft_extend
            draft_extend_input = EagleDraftExtendInput(self.speculative_num_draft_tokens)
            self.gpu.launch("seq_lens_sum", batch.batch_size())  # select_index = arange * n + accept_lens - 1
            forward_batch = prepare_for_draft_extend(draft_extend_input, batch, self.speculative_num_draft_tokens,
                                                     self.draft_runner, cuda_graph_runner)
            can_run_decode_cuda_graph = bool(cuda_graph_runner and cuda_graph_runner.can_run_graph(forward_batch))
            if can_run_decode_cuda_graph:
                draft_logits_output = cuda_graph_runner.execute(forward_batch, "select_index")
            else:
                draft_logits_output = self.draft_runner.forward(forward_batch).logits_output
            fast_topk(self.gpu, batch.batch_size())  # argmax (topk 1) / fast_topk on the selected rows


class EAGLEWorkerV2(BaseSpecWorker):
    def __init__(self, server_args, gpu, target_worker):
        self.server_args = server_args
        self.gpu = gpu
        self.topk = server_args.speculative_eagle_topk
        self.speculative_num_steps = server_args.speculative_num_steps
        self.speculative_num_draft_tokens = server_args.speculative_num_draft_tokens
        self._target_worker = target_worker
        self._draft_worker = EagleDraftWorker(server_args, gpu, target_worker)

    def init_cuda_graphs(self):
        self._draft_worker.init_cuda_graphs()

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
                    # Draft prefill
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
