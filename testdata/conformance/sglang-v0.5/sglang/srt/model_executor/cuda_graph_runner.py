"""Mirrors sglang/srt/model_executor/cuda_graph_runner.py (CudaGraphRunner): the target model's
decode/TARGET_VERIFY forward captured per batch size at startup; replay() copies the inputs into
the static buffers and launches the graph."""

from fake_torch.cuda import CUDAGraph, graph
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class CudaGraphRunner(object):
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.gpu = model_runner.gpu
        sa = model_runner.server_args
        self.num_tokens_per_bs = sa.speculative_num_draft_tokens
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def can_run(self, forward_batch):
        return (forward_batch.forward_mode == ForwardMode.TARGET_VERIFY
                and forward_batch.batch_size in self.graphs)

    def capture(self):
        bs = self.model_runner.server_args.batch_size
        self.graphs[bs], self.output_buffers[bs] = self.capture_one_batch_size(bs, self.model_runner.model.forward)

    def capture_one_batch_size(self, bs, forward):
        g = CUDAGraph(self.gpu)
        fb = ForwardBatch(ForwardMode.TARGET_VERIFY, bs, bs * self.num_tokens_per_bs)

        def run_once():
            return forward(fb)

        with graph(g):
            out = run_once()
        return g, out

    def replay_prepare(self, forward_batch):
        # self.input_ids[:raw_num_token].copy_(forward_batch.input_ids) and friends
        self.gpu.launch("copy_next_token_ids", forward_batch.num_tokens)
        self.bs = forward_batch.batch_size

    def replay(self, forward_batch, skip_attn_backend_init=False, pp_proxy_tensors=None):
        self.replay_prepare(forward_batch)
        self.graphs[self.bs].replay()
        return self.output_buffers[self.bs]
