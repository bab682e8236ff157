"""Mirrors sglang/srt/speculative/eagle_draft_cuda_graph_runner.py (v0.5): the multi-step draft
(EAGLEWorker.draft_forward) captured per batch size at startup; replay() copies the inputs into
the static buffers and launches the graph."""

from fake_torch.cuda import CUDAGraph, graph
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class EAGLEDraftCudaGraphRunner(object):
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.gpu = eagle_worker.gpu
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def can_run(self, forward_batch):
        return forward_batch.batch_size in self.graphs

    def capture(self):
        bs = self.eagle_worker.server_args.batch_size
        self.graphs[bs], self.output_buffers[bs] = self.capture_one_batch_size(bs, self.eagle_worker.draft_forward)

    def capture_one_batch_size(self, num_seqs, forward):
        g = CUDAGraph(self.gpu)
        fb = ForwardBatch(ForwardMode.DECODE, num_seqs, num_seqs * self.eagle_worker.topk)

        def run_once():
            return forward(fb)

        with graph(g):
            out = run_once()
        return g, out

    def replay(self, forward_batch):
        bs = forward_batch.batch_size
        self.gpu.launch("copy_next_token_ids", bs)  # buffers.seq_lens[:raw_bs].copy_(...) etc.
        self.graphs[bs].replay()
        return self.output_buffers[bs]
