"""vllm/forward_context.py: set_forward_context makes the batch's attention metadata and
CUDA graph runtime mode visible to the model's layers and graph wrappers."""

import contextlib

NONE, PIECEWISE, FULL = "NONE", "PIECEWISE", "FULL"


class ForwardContext(object):
    def __init__(self, attn_metadata, num_tokens, cudagraph_runtime_mode):
        self.attn_metadata = attn_metadata
        self.num_tokens = num_tokens
        self.cudagraph_runtime_mode = cudagraph_runtime_mode


_forward_context = None


def get_forward_context():
    return _forward_context


@contextlib.contextmanager
def set_forward_context(attn_metadata, vllm_config=None, num_tokens=1,
                        cudagraph_runtime_mode=NONE, **kwargs):
    global _forward_context
    prev = _forward_context
    _forward_context = ForwardContext(attn_metadata, num_tokens, cudagraph_runtime_mode)
    try:
        yield
    finally:
        _forward_context = prev
