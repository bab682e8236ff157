"""Mirrors sglang/srt/utils/common.py: DynamicGradMode, the decorator on the scheduler's event
loops (torch.inference_mode or no_grad around the call): one wrapper frame below the loop."""

import functools


class DynamicGradMode(object):
    def __call__(self, func):
        @functools.wraps(func)
        def _fn(*args, **kwargs):
            return func(*args, **kwargs)
        return _fn
