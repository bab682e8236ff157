"""Mirrors sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py: the draft model's
catch-up forward over the verified tokens (draft-extend) captured in one CUDA graph."""

import torch


class EAGLEDraftExtendCudaGraphRunner:
    def __init__(self, eagle_worker):
        self.eagle_worker = eagle_worker
        self.graph = None
        self.capture()

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.eagle_worker._draft_extend_forward()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.eagle_worker._draft_extend_forward()

    def replay(self):
        self.graph.replay()
