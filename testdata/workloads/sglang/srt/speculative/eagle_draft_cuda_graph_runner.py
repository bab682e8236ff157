"""Mirrors sglang/srt/speculative/eagle_draft_cuda_graph_runner.py: the whole multi-step draft
(draft_forward's loop) captured as one CUDA graph at startup; `replay` is one cuGraphLaunch."""

from fake_torch.cuda import CUDAGraph, graph
from fakecuda import tag
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class EAGLEDraftCudaGraphRunner(object):
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.gpu = eagle_worker.gpu
        self.topk = eagle_worker.topk
        self.capture_bs = [eagle_worker.server_args.batch_size]
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def can_run(self, forward_batch):
        return forward_batch.batch_size in self.graphs

    def capture(self):
        for bs in self.capture_bs:
            graph_, out = self.capture_one_batch_size(bs, self.eagle_worker._draft_forward_steps)
            self.graphs[bs] = graph_
            self.output_buffers[bs] = out

    def capture_one_batch_size(self, num_seqs, forward):
        cuda_graph = CUDAGraph(self.gpu)
        forward_batch = ForwardBatch(ForwardMode.DECODE, num_seqs, num_seqs * self.topk)

        def run_once():
            return forward(forward_batch)

        with graph(cuda_graph):
            out = run_once()
        return cuda_graph, out

    def replay(self, forward_batch):
        with tag("spec.draft"):
            return self._replay(forward_batch)

    def _replay(self, forward_batch):
        bs = forward_batch.batch_size
        self.eagle_worker.gpu.replay_prepare(bs)  # the static inputs: a fill_ and a copy_
        self.graphs[bs].replay()
        return self.output_buffers[bs]
