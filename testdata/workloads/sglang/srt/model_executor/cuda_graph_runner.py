"""Mirrors sglang/srt/model_executor/cuda_graph_runner.py (CudaGraphRunner): the target model's
TARGET_VERIFY forward captured once per batch size at startup, replayed by cuGraphLaunch."""

from fake_torch.cuda import CUDAGraph, graph
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class CudaGraphRunner(object):
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.gpu = model_runner.gpu
        sa = model_runner.server_args
        self.capture_forward_mode = ForwardMode.TARGET_VERIFY
        self.num_tokens_per_bs = sa.speculative_num_draft_tokens
        self.capture_bs = [sa.batch_size]
        self.graphs = {}
        self.output_buffers = {}
        self.bs = None
        self.capture()

    def can_run(self, forward_batch):
        return (forward_batch.forward_mode == self.capture_forward_mode
                and forward_batch.batch_size in self.graphs)

    def capture(self):
        for bs in self.capture_bs:
            graph_, out = self.capture_one_batch_size(bs, self.model_runner.model.forward)
            self.graphs[bs] = graph_
            self.output_buffers[bs] = out

    def capture_one_batch_size(self, bs, forward):
        cuda_graph = CUDAGraph(self.gpu)
        forward_batch = ForwardBatch(self.capture_forward_mode, bs, bs * self.num_tokens_per_bs)

        def run_once():
            return forward(forward_batch)

        with graph(cuda_graph):
            out = run_once()
        return cuda_graph, out

    def replay_prepare(self, forward_batch):
        self.bs = forward_batch.batch_size

    def replay(self, forward_batch, skip_attn_backend_init=False):
        self.replay_prepare(forward_batch)
        self.graphs[self.bs].replay()
        return self.output_buffers[self.bs]
