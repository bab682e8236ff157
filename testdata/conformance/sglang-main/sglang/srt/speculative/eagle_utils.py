"""Mirrors sglang/srt/speculative/eagle_utils.py (main): build_tree_kernel_efficient,
organize_draft_results, eagle_prepare_for_verify, eagle_sample (the acceptance: argmax and
verify_tree_greedy on the device, nothing copied to the host), eagle_prepare_for_decode."""


def organize_draft_results(gpu, forward_batch):
    gpu.launch("organize_draft_results", forward_batch.batch_size)
    return "parent_list", "top_scores_index", "draft_tokens"


def build_tree_kernel_efficient(gpu, bs):
    gpu.launch("build_tree", bs)


def eagle_prepare_for_verify(verify_input, batch, target_worker):
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    gpu = batch.gpu
    gpu.launch("assign_req_to_token_pool", batch.batch_size())  # assign_extend_cache_locs_uniform_func
    batch.forward_mode = ForwardMode.TARGET_VERIFY
    fb = ForwardBatch.init_new(batch.get_model_worker_batch(), target_worker.model_runner)
    runner = target_worker.model_runner.decode_cuda_graph_runner
    can_run_cuda_graph = bool(runner and runner.can_run_graph(fb))
    if can_run_cuda_graph:
        runner.load_batch(fb)
    return fb, can_run_cuda_graph


def eagle_sample(verify_input, batch, logits_output, grammar_mask=None):
    from oracle import O, ph
    with ph("spec.accept", O.cur):
        return _eagle_sample_body(verify_input, batch, logits_output)


def _eagle_sample_body(verify_input, batch, logits_output):
    gpu, bs = batch.gpu, batch.batch_size()
    gpu.launch("fast_topk", logits_output.num_tokens)  # torch.argmax(next_token_logits)
    gpu.launch("verify_tree_greedy", bs)              # verify_tree_greedy_func
    return "predict", "accept_lens", "accept_index"


def eagle_prepare_for_decode(batch):
    # cur/nxt kv lens .to(device, non_blocking=True), then alloc_for_spec_decode
    batch.gpu.launch("write_req_to_token_pool", batch.batch_size())
