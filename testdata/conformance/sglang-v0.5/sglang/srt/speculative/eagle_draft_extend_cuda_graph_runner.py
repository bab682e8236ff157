"""Mirrors sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py (v0.5): the draft
model's extend over the accepted tokens plus its softmax/top-k, one graph per batch size."""

from fake_torch.cuda import CUDAGraph, graph
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.spec_utils import fast_topk


class EAGLEDraftExtendCudaGraphRunner(object):
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.gpu = eagle_worker.gpu
        self.num_tokens_per_bs = eagle_worker.speculative_num_steps + 1
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def can_run(self, forward_batch):
        return forward_batch.batch_size in self.graphs

    def capture(self):
        bs = self.eagle_worker.server_args.batch_size
        self.graphs[bs], self.output_buffers[bs] = self.capture_one_batch_size(bs)

    def capture_one_batch_size(self, bs):
        g = CUDAGraph(self.gpu)
        fb = ForwardBatch(ForwardMode.DRAFT_EXTEND, bs, bs * self.num_tokens_per_bs)
        runner = self.eagle_worker.draft_model_runner
        gpu = self.gpu

        def run_once():
            ret = runner.model.forward(fb)
            fast_topk(gpu, bs)
            return ret

        with graph(g):
            out = run_once()
        return g, out

    def replay(self, forward_batch):
        bs = forward_batch.batch_size
        self.gpu.launch("copy_next_token_ids", bs)
        self.graphs[bs].replay()
        return self.output_buffers[bs]
