"""Mirrors sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py (main): the draft
model's extend over the verify tree, one graph per batch size; execute(forward_batch,
select_index) is the inherited DecodeCudaGraphRunner.execute."""

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.model_executor.runner import DecodeCudaGraphRunner


class EAGLEDraftExtendCudaGraphRunner(DecodeCudaGraphRunner):
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.model_runner = eagle_worker.draft_runner
        self.gpu = eagle_worker.gpu
        self.num_tokens_per_bs = eagle_worker.speculative_num_draft_tokens
        self.capture_forward_mode = ForwardMode.DRAFT_EXTEND
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def capture_forward(self):
        return self.model_runner.model.forward
