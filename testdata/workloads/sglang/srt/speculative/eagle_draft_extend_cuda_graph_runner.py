"""Mirrors sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py: the draft model's
extend over the accepted tokens (plus its top-k) captured as one CUDA graph."""

from fake_torch.cuda import CUDAGraph, graph
from fakecuda import tag
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class EAGLEDraftExtendCudaGraphRunner(object):
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.gpu = eagle_worker.gpu
        self.num_tokens_per_bs = eagle_worker.speculative_num_steps + 1
        self.capture_bs = [eagle_worker.server_args.batch_size]
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def can_run(self, forward_batch):
        return forward_batch.batch_size in self.graphs

    def capture(self):
        for bs in self.capture_bs:
            graph_, out = self.capture_one_batch_size(bs)
            self.graphs[bs] = graph_
            self.output_buffers[bs] = out

    def capture_one_batch_size(self, bs):
        cuda_graph = CUDAGraph(self.gpu)
        forward_batch = ForwardBatch(ForwardMode.DRAFT_EXTEND, bs, bs * self.num_tokens_per_bs)
        model = self.eagle_worker.draft_model_runner.model
        gpu = self.gpu

        def run_once():
            ret = model.forward(forward_batch)
            gpu.launch("fast_topk", bs)  # softmax + fast_topk on the last hidden states
            return ret

        with graph(cuda_graph):
            out = run_once()
        return cuda_graph, out

    def replay(self, forward_batch):
        with tag("spec.draft_extend"):
            bs = forward_batch.batch_size
            self.eagle_worker.gpu.replay_prepare(bs)  # the static inputs: a fill_ and a copy_
            self.graphs[bs].replay()
            return self.output_buffers[bs]
