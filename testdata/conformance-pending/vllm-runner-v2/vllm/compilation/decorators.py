"""vllm/compilation/decorators.py: @support_torch_compile replaces the model's __call__ by the
compiled graph; with piecewise CUDA graphs that graph is split at the attention ops, each piece
run by a CUDAGraphWrapper (PiecewiseBackend), attention eagerly between them. Outside PIECEWISE
mode the model's forward runs as Python."""

from vllm.compilation.piecewise_backend import PiecewiseBackend
from vllm.forward_context import PIECEWISE, get_forward_context


def support_torch_compile(cls):
    orig_call = cls.__call__

    def __call__(self, *args, **kwargs):
        ctx = get_forward_context()
        if ctx is not None and ctx.cudagraph_runtime_mode == PIECEWISE:
            backend = self.__dict__.get("_piecewise_backend")
            if backend is None:
                backend = self._piecewise_backend = PiecewiseBackend(self)
            return backend(*args, **kwargs)
        return orig_call(self, *args, **kwargs)

    cls.__call__ = __call__
    return cls
