"""Mirrors sglang/srt/distributed/communication_op.py."""


def tensor_model_parallel_all_reduce(tp_group, count):
    """All-reduce `count` bf16 elements across the tensor-parallel group."""
    return tp_group.all_reduce(count)
