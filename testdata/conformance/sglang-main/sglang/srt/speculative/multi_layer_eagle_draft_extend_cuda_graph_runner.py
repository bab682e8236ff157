"""Mirrors sglang/srt/speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py (main).

MultiLayerEagleDraftExtendCudaGraphRunner(DecodeCudaGraphRunner) captures one draft step (one
MTP layer's forward + its top-k) per batch size; MultiLayerEagleMultiStepDraftExtendCudaGraphRunner
owns the per-step runners and one shared buffer set: the worker calls prepare(forward_batch)
once, then replay(step) per step, rotating input_ids between steps itself.
OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner (SGLANG_ENABLE_SINGLE_CG_DRAFT)
captures every step and the rotations in one graph: replay(0) launches it, later steps are
served from its outputs. Upstream replays through the runner's graph backend object; here the
runner replays its CUDAGraph itself (the frames below the runner carry no phase)."""

from fake_torch.cuda import CUDAGraph, graph
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.runner import DecodeCudaGraphRunner
from sglang.srt.speculative.multi_layer_eagle_utils import (
    fill_draft_extend_prepare_buffers_triton,
    rotate_input_ids,
)
from sglang.srt.speculative.spec_utils import fast_topk


class MultiLayerEagleDraftExtendInputBuffers(object):
    """The one persistent buffer set every draft step reads (torch.zeros on the device)."""

    def __init__(self, gpu, max_num_token):
        cuda = gpu.cuda
        n = max(1, min(64, max_num_token))
        self.input_ids = cuda.alloc(8 * 64)
        self.hidden_states = cuda.alloc(8 * 64)
        self.select_index = cuda.alloc(8 * 64)
        for buf in (self.input_ids, self.hidden_states, self.select_index):
            cuda.memset_d32_async(buf, 0, n, gpu.cur_stream)


class MultiLayerEagleDraftExtendCudaGraphRunner(DecodeCudaGraphRunner):
    """Per-step runner. As upstream, __init__ only sets fields; the composite runner attaches the
    shared buffers and captures (init_buffers_and_capture)."""

    def __init__(self, eagle_worker, step):
        self.step = step
        self.eagle_worker = eagle_worker
        self.model_runner = eagle_worker.mtp_model_runner(step)
        self.gpu = eagle_worker.gpu
        self.forward_mode = ForwardMode.DRAFT_EXTEND
        self.capture_forward_mode = self.forward_mode
        self.captured_req_width = eagle_worker.speculative_num_steps + 1
        self.num_tokens_per_bs = self.captured_req_width
        self.max_bs = self.model_runner.server_args.batch_size
        # Whether the attention backend rebuilds its per-step metadata inside the graph; when not,
        # replay() rebuilds it eagerly first (init_forward_metadata_out_graph).
        self.metadata_captured_in_graph = eagle_worker.draft_extend_metadata_captured_in_graph
        self.graphs = {}
        self.output_buffers = {}

    def init_buffers_and_capture(self, buffers):
        self.buffers = buffers
        self.capture()

    def can_run_graph(self, forward_batch):
        spec_info = forward_batch.spec_info
        if spec_info is not None and spec_info.num_tokens_per_req != self.captured_req_width:
            return False
        return forward_batch.batch_size <= self.max_bs

    def get_forward_batch(self, bs):
        return ForwardBatch(self.forward_mode, bs, bs * self.captured_req_width)

    def _compute_topk(self, ret, bs):
        fast_topk(self.gpu, bs)  # softmax over the last accepted row's logits, then fast_topk

    def _run_step_body(self, forward_batch, num_tokens, bs):
        ret = self.model_runner.model.forward(forward_batch)
        self._compute_topk(ret, bs)
        return ret

    def capture_one_shape(self, size, forward):
        bs = size
        forward_batch = self.get_forward_batch(bs)
        num_tokens = forward_batch.num_tokens

        def run_once():
            return self._run_step_body(forward_batch, num_tokens, bs)

        g = CUDAGraph(self.gpu)
        with graph(g):
            out = run_once()
        return g, out

    def replay(self, bs, seq_lens_sum, spec_info, seq_lens_cpu):
        if not self.metadata_captured_in_graph:
            self.gpu.launch("seq_lens_sum", bs)  # attn_backend.init_forward_metadata_out_graph
        return self._replay_graph(bs, None)

    def _replay_graph(self, shape_key, forward_batch):
        self.graphs[shape_key].replay()
        return self.output_buffers[shape_key]


class MultiLayerEagleMultiStepDraftExtendCudaGraphRunner(object):
    """Owns the shared buffer set and the per-step runners; not a DecodeCudaGraphRunner."""

    rotates_in_graph = False

    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.gpu = eagle_worker.gpu
        self.speculative_num_steps = eagle_worker.speculative_num_steps
        self.runners = []
        self._init_and_capture()

    def _create_runners(self):
        self.runners = [MultiLayerEagleDraftExtendCudaGraphRunner(self.eagle_worker, step)
                        for step in range(self.speculative_num_steps)]
        self.captured_req_width = self.runners[0].captured_req_width
        self.max_bs = self.runners[0].max_bs

    def _allocate_buffers(self):
        return MultiLayerEagleDraftExtendInputBuffers(self.gpu, self.max_bs * self.captured_req_width)

    def _init_and_capture(self):
        self._create_runners()
        self.buffers = self._allocate_buffers()
        # Captured in reverse step order, as upstream.
        for step in range(self.speculative_num_steps - 1, -1, -1):
            self.runners[step].init_buffers_and_capture(self.buffers)

    def prepare(self, forward_batch):
        self.raw_bs = forward_batch.batch_size
        self.bs = self.raw_bs  # the captured bucket (one batch size here)
        self.raw_num_tokens = self.raw_bs * self.captured_req_width
        fill_draft_extend_prepare_buffers_triton(self.gpu, self.raw_num_tokens)

    def replay(self, step):
        out = self.runners[step].replay(self.bs, None, None, None)
        return out, "topk_p", "topk_index"

    def can_run_graph(self, forward_batch):
        return self.runners[0].can_run_graph(forward_batch)


class OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner(MultiLayerEagleMultiStepDraftExtendCudaGraphRunner):
    """Single-CG variant: all steps' forwards and the input_ids rotations in one graph."""

    rotates_in_graph = True

    def _init_and_capture(self):
        self._create_runners()
        self.buffers = self._allocate_buffers()
        for r in self.runners:
            r.buffers = self.buffers
        self._capture_one_graph(self.max_bs, self.runners)

    def _capture_one_graph(self, bs, runners):
        buffers = self.buffers
        cuda, stream = self.gpu.cuda, self.gpu.cur_stream
        items = [(r, r.get_forward_batch(bs)) for r in runners]
        n = len(items)

        def multi_step_fn():
            outs = []
            for i, (r, forward_batch) in enumerate(items):
                outs.append(r._run_step_body(forward_batch, forward_batch.num_tokens, bs))
                if i < n - 1:
                    rotate_input_ids(self.gpu, forward_batch.num_tokens)
            return outs

        # The capture's warm-up rotates the shared buffers: snapshot (clone) and restore (copy_)
        # input_ids / hidden_states / select_index outside the graph.
        snap = [cuda.alloc(8 * 64) for _ in range(3)]
        live = (buffers.input_ids, buffers.hidden_states, buffers.select_index)
        for dst, src in zip(snap, live):
            cuda.dtod_async(dst, src, 8 * 64, stream)
        first = runners[0]
        g = CUDAGraph(self.gpu)
        with graph(g):
            outs = multi_step_fn()
        first.graphs[bs], first.output_buffers[bs] = g, outs
        for dst, src in zip(live, snap):
            cuda.dtod_async(dst, src, 8 * 64, stream)

    def replay(self, step):
        if step == 0:
            first = self.runners[0]
            first.graphs[self.bs].replay()
            outs = first.output_buffers[self.bs]
            self._cached = dict((r.step, (out, "topk_p", "topk_index")) for r, out in zip(self.runners, outs))
        return self._cached[step]
