"""torch/utils/_contextlib.py: a decorator made from a context manager wraps the function in
`decorate_context` (the frame between a @torch.inference_mode() method and its caller)."""

import functools


class _DecoratorContextManager(object):
    def __call__(self, func):
        @functools.wraps(func)
        def decorate_context(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return decorate_context

    def clone(self):
        return self.__class__()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class inference_mode(_DecoratorContextManager):
    """Usable as @torch.inference_mode() and, as torch allows, bare: @torch.inference_mode."""

    def __new__(cls, mode_or_fn=True):
        if callable(mode_or_fn):
            return cls()(mode_or_fn)
        return super().__new__(cls)

    def __init__(self, mode=True):
        self.mode = mode
