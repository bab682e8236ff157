"""Mirrors sglang/srt/speculative/eagle_draft_cuda_graph_runner.py: the whole multi-step draft
(EAGLEWorker.draft_forward, K draft-model steps) captured in one CUDA graph."""

import torch


class EAGLEDraftCudaGraphRunner:
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.graph = None
        self.capture()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.eagle_worker.draft_forward()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.eagle_worker.draft_forward()

    def replay(self):
        self.graph.replay()
