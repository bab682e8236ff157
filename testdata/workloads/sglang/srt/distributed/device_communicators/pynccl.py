"""Mirrors sglang/srt/distributed/device_communicators/pynccl.py: ncclAllReduce through ctypes
(fakecuda.Nccl) on the thread's current stream."""


class PyNcclCommunicator(object):
    def __init__(self, gpu):
        self.gpu = gpu  # simkernels.SimGpu; gpu.nccl is the communicator

    def all_reduce(self, count):
        self.gpu.allreduce(count)
