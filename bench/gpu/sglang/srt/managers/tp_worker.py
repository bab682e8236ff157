"""Mirrors sglang/srt/managers/tp_worker.py: TpModelWorker.forward_batch_generation runs the
target forward (a CUDA graph replay, or eager launches with --disable-cuda-graph)."""

from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner


class TpModelWorker:
    def __init__(self, model):
        self.model = model
        self.graph_runner = None

    def init_cuda_graphs(self, input_ids, positions):
        self.graph_runner = CudaGraphRunner(self.model, input_ids, positions)

    def forward_batch_generation(self, input_ids, positions, is_verify=False):
        if self.graph_runner is not None:
            return self.graph_runner.replay()
        return self.model.greedy(input_ids, positions)
