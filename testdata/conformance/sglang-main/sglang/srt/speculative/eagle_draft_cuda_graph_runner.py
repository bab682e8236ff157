"""Mirrors sglang/srt/speculative/eagle_draft_cuda_graph_runner.py (main):
EAGLEDraftCudaGraphRunner(DecodeCudaGraphRunner) captures EagleDraftWorker.draft_forward per batch
size (capture_one_shape -> run_once); the draft calls the inherited execute()."""

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.model_executor.runner import DecodeCudaGraphRunner


class EAGLEDraftCudaGraphRunner(DecodeCudaGraphRunner):
    def __init__(self, eagle_worker):
        # As upstream: does not call DecodeCudaGraphRunner.__init__.
        self.eagle_worker = eagle_worker
        self.model_runner = eagle_worker.draft_runner
        self.gpu = eagle_worker.gpu
        self.num_tokens_per_bs = eagle_worker.topk
        self.capture_forward_mode = ForwardMode.DECODE
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def capture_forward(self):
        return self.eagle_worker.draft_forward

    def _replay_graph(self, shape_key, forward_batch):
        self.graphs[shape_key].replay()
        return self.output_buffers[shape_key]
