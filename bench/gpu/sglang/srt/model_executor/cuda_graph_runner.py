"""Mirrors sglang/srt/model_executor/cuda_graph_runner.py: the target model's CUDA graph for
TARGET_VERIFY (K+1 tokens), captured once, replayed every cycle (CudaGraphRunner.replay)."""

import torch


class CudaGraphRunner:
    def __init__(self, model, input_ids, positions):
        self.model = model
        self.input_ids = input_ids    # static input buffers (filled by the draft)
        self.positions = positions
        self.graph = None
        self.output = None
        self.capture()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.model.greedy(self.input_ids, self.positions)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = self.model.greedy(self.input_ids, self.positions)

    def replay(self):
        self.graph.replay()
        return self.output
