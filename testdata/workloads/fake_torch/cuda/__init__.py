from fake_torch.cuda.graphs import CUDAGraph, graph  # noqa: F401
