"""Mirrors sglang/srt/speculative/eagle_worker_common.py (main): module functions shared by the
v2 EAGLE workers: prepare_for_draft, build_eagle_verify_input, run_eagle_verify (target verify
forward + eagle_sample + bonus-token bookkeeping), prepare_for_draft_extend."""

from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from sglang.srt.speculative.eagle_utils import build_tree_kernel_efficient, eagle_prepare_for_verify, eagle_sample


def prepare_for_draft(draft_input, batch, cuda_graph_runner, draft_model_runner, topk, num_steps):
    batch.gpu.launch("assign_draft_cache_locs", batch.batch_size())  # assign_draft_cache_locs_contiguous
    draft_input.num_tokens_per_req = topk
    batch.forward_mode = ForwardMode.DECODE
    fb = ForwardBatch.init_new(batch.get_model_worker_batch(), draft_model_runner)
    return fb, bool(cuda_graph_runner and cuda_graph_runner.can_run_graph(fb))


def build_eagle_verify_input(batch, draft_input, num_steps, num_draft_tokens):
    build_tree_kernel_efficient(batch.gpu, batch.batch_size())
    return EagleVerifyInput(num_draft_tokens, num_steps)


def run_eagle_verify(batch, target_worker, num_draft_tokens):
    verify_input = batch.spec_info
    verify_forward_batch, can_run_cuda_graph = eagle_prepare_for_verify(verify_input, batch, target_worker)
    out = target_worker.forward_batch_generation(batch=None, forward_batch=verify_forward_batch, is_verify=True)
    logits_output = out.logits_output
    predict, accept_lens, accept_index = eagle_sample(verify_input, batch, logits_output)
    batch.gpu.launch("copy_next_token_ids", batch.batch_size())  # fill_bonus_tokens_func
    return GenerationBatchResult(logits_output=logits_output, next_token_ids=predict,
                                 can_run_cuda_graph=can_run_cuda_graph,
                                 next_draft_input=EagleDraftInput(bonus_tokens="bonus"),
                                 accept_lens=accept_lens)


def prepare_for_draft_extend(draft_extend_input, batch, num_draft_tokens, draft_model_runner, cuda_graph_runner):
    batch.spec_info = draft_extend_input
    batch.forward_mode = ForwardMode.DRAFT_EXTEND
    fb = ForwardBatch.init_new(batch.get_model_worker_batch(), draft_model_runner)
    if not (cuda_graph_runner and cuda_graph_runner.can_run_graph(fb)):
        batch.gpu.launch("seq_lens_sum", batch.batch_size())  # attn_backend.init_forward_metadata
    return fb
