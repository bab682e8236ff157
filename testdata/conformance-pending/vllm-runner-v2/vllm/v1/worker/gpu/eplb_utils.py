"""vllm/v1/worker/gpu/eplb_utils.py: step_eplb_after runs the expert-parallel load balancer
after the decorated call (a no-op without EPLB)."""

import functools


def step_eplb_after():
    def decorator(fn):
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            out = fn(self, *args, **kwargs)
            self.eplb_step() if hasattr(self, "eplb_step") else None
            return out

        return wrapper

    return decorator
