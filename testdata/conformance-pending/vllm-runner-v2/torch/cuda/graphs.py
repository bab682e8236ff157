"""torch/cuda/graphs.py: CUDAGraph.replay is the innermost Python frame of a graph replay
(cuGraphLaunch on the current stream); torch.cuda.graph captures on a side stream."""

import contextlib

import simgpu


class CUDAGraph(object):
    def __init__(self):
        self._exec = None
        self._cm = None

    def capture_begin(self):
        gpu = simgpu.GPU
        self._cm = gpu.cuda.capture(gpu.capture_stream)
        self._exec = self._cm.__enter__()
        gpu.cur_stream = gpu.capture_stream

    def capture_end(self, exc_info=(None, None, None)):
        gpu = simgpu.GPU
        gpu.cur_stream = gpu.stream
        cm, self._cm = self._cm, None
        cm.__exit__(*exc_info)

    def replay(self):
        gpu = simgpu.GPU
        gpu.cuda.graph_launch(self._exec.handle, gpu.cur_stream)


@contextlib.contextmanager
def graph(cuda_graph):
    cuda_graph.capture_begin()
    try:
        yield cuda_graph
    except BaseException as e:
        cuda_graph.capture_end((type(e), e, e.__traceback__))
        raise
    cuda_graph.capture_end()
