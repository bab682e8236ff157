"""Mirrors torch/cuda/graphs.py: `CUDAGraph.replay` is the innermost Python frame of every
CUDA-graph replay (cuGraphLaunch), as in torch."""

import contextlib


class CUDAGraph(object):
    """A captured CUDA graph (torch.cuda.CUDAGraph). `gpu` is the thread's simkernels.SimGpu."""

    def __init__(self, gpu):
        self.gpu = gpu
        self._exec = None
        self._stream = None

    def capture_begin(self):
        gpu = self.gpu
        self._stream = gpu.stream
        self._cm = gpu.cuda.capture(gpu.capture_stream)
        self._exec = self._cm.__enter__()
        gpu.cur_stream = gpu.capture_stream

    def capture_end(self, exc_info=(None, None, None)):
        self.gpu.cur_stream = self.gpu.stream
        cm, self._cm = self._cm, None
        cm.__exit__(*exc_info)

    def replay(self):
        # torch: super().replay() -> cudaGraphLaunch(exec, current stream)
        self.gpu.cuda.graph_launch(self._exec.handle, self._stream)


@contextlib.contextmanager
def graph(cuda_graph):
    """torch.cuda.graph: capture everything launched inside the block into cuda_graph, on a side
    stream; the graph replays on the thread's compute stream."""
    cuda_graph.capture_begin()
    try:
        yield cuda_graph
    except BaseException as e:
        cuda_graph.capture_end((type(e), e, e.__traceback__))
        raise
    cuda_graph.capture_end()
