"""torch/cuda/streams.py: Event (created at its first record, as torch does), Stream.wait_stream
(an event recorded on the other stream and waited for), the current-stream context."""

import contextlib

import fakecuda
import simgpu

CU_EVENT_BLOCKING_SYNC = 1


class Stream(object):
    def __init__(self):
        self.handle = simgpu.GPU.cuda.stream()

    def wait_stream(self, other):
        ev = Event()
        ev.record(other)
        simgpu.GPU.cuda.stream_wait_event(self.handle, ev.handle)


class _Default(object):
    handle = fakecuda.LEGACY_STREAM

    def wait_stream(self, other):
        ev = Event()
        ev.record(other)
        simgpu.GPU.cuda.stream_wait_event(self.handle, ev.handle)


def current_stream():
    gpu = simgpu.GPU
    if gpu.cur_stream == gpu.stream:
        return _Default()
    s = Stream.__new__(Stream)
    s.handle = gpu.cur_stream
    return s


@contextlib.contextmanager
def stream(s):
    gpu = simgpu.GPU
    prev = gpu.cur_stream
    gpu.cur_stream = s.handle
    try:
        yield
    finally:
        gpu.cur_stream = prev


class Event(object):
    def __init__(self, blocking=False):
        self.flags = fakecuda.CU_EVENT_DISABLE_TIMING | (CU_EVENT_BLOCKING_SYNC if blocking else 0)
        self.handle = None

    def record(self, s=None):
        gpu = simgpu.GPU
        if self.handle is None:
            self.handle = gpu.cuda.event(self.flags)
        gpu.cuda.event_record(self.handle, s.handle if s is not None else gpu.cur_stream)

    def synchronize(self):
        if self.handle is not None:
            simgpu.GPU.cuda.event_sync(self.handle)

    def destroy(self):
        if self.handle is not None:
            simgpu.GPU.destroy_event(self.handle)
            self.handle = None
