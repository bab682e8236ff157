"""Mirrors DecodeCudaGraphRunner of sglang/srt/model_executor/runner (main, 2026): capture() per
batch size at startup; execute() loads the batch into the static buffers (unless load_batch ran
already) and replays through _replay_graph. EAGLE's draft runners subclass it and inherit
execute(), so the execute frame names DecodeCudaGraphRunner for draft, draft-extend and target
verify alike (the enclosing worker frame tells them apart). The module's file name under
runner/ is not confirmed upstream."""

from fake_torch.cuda import CUDAGraph, graph
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class DecodeCudaGraphRunner(object):
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.gpu = model_runner.gpu
        self.num_tokens_per_bs = model_runner.server_args.speculative_num_draft_tokens
        self.capture_forward_mode = ForwardMode.TARGET_VERIFY
        self.graphs = {}
        self.output_buffers = {}
        self.capture()

    def can_run_graph(self, forward_batch):
        return forward_batch.batch_size in self.graphs

    def capture(self):
        bs = self.model_runner.server_args.batch_size
        self.graphs[bs], self.output_buffers[bs] = self.capture_one_shape(bs, self.capture_forward())

    def capture_forward(self):
        return self.model_runner.model.forward

    def capture_one_shape(self, size, forward):
        g = CUDAGraph(self.gpu)
        fb = ForwardBatch(self.capture_forward_mode, size, size * self.num_tokens_per_bs)

        def run_once():
            return forward(fb)

        with graph(g):
            out = run_once()
        return g, out

    def load_batch(self, forward_batch):
        self.gpu.launch("copy_next_token_ids", forward_batch.num_tokens)  # buffers[:n].copy_(...)
        forward_batch.loaded = True

    def execute(self, forward_batch, *args):
        if not getattr(forward_batch, "loaded", False):
            self.load_batch(forward_batch)
        return self._replay_graph(forward_batch.batch_size, forward_batch)

    def _replay_graph(self, shape_key, forward_batch):
        self.graphs[shape_key].replay()
        return self.output_buffers[shape_key]
