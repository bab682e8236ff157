from torch.cuda.graphs import CUDAGraph, graph  # noqa: F401
from torch.cuda.streams import Event, Stream, current_stream, stream  # noqa: F401
