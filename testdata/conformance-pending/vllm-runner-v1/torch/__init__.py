"""The few torch frames that sit between vLLM's code and the driver in the real server:
nn.Module.__call__ (torch/nn/modules/module.py), inference_mode's wrapper
(torch/utils/_contextlib.py), CUDAGraph.replay (torch/cuda/graphs.py) and torch.cuda.Event /
Stream (torch/cuda/streams.py). Standard library only."""

from torch.utils._contextlib import inference_mode  # noqa: F401
from torch import cuda  # noqa: F401
from torch import nn  # noqa: F401
