"""transformers/modeling_rope_utils.py: dynamic_rope_update wraps the rotary embedding forward
(`dynamic_rope_update.<locals>.wrapper`); for the default rope type it only calls through."""

import functools


def dynamic_rope_update(rope_forward):
    @functools.wraps(rope_forward)
    def wrapper(self, x, position_ids):
        return rope_forward(self, x, position_ids)

    return wrapper
