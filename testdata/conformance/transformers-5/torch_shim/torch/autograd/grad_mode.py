"""Mirrors torch/autograd/grad_mode.py: no_grad is a _DecoratorContextManager."""

_contextlib = None  # set by simtorch.load_shim (the shim is loaded by path, not imported)


def make_no_grad(base):
    class no_grad(base):
        def __enter__(self):
            return None

        def __exit__(self, exc_type, exc_value, traceback):
            return False

    return no_grad
