"""Mirrors sglang/srt/distributed/parallel_state.py (GroupCoordinator)."""


class GroupCoordinator(object):
    def __init__(self, pynccl_comm):
        self.pynccl_comm = pynccl_comm

    def all_reduce(self, count):
        return self._all_reduce_in_place(count)

    def _all_reduce_in_place(self, count):
        self.pynccl_comm.all_reduce(count)
