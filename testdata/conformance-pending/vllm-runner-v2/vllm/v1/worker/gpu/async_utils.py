"""vllm/v1/worker/gpu/async_utils.py: AsyncOutput starts the host copy of a step's sampled tokens
on the copy stream after the main stream's work (wait_stream) and records copy_event there;
get_output waits for it (a blocking-sync event: cuEventSynchronize)."""

import contextlib
import ctypes
import threading

import torch

import simgpu
from simgpu import at_cycle_of
from vllm.v1.outputs import AsyncModelRunnerOutput


class AsyncOutput(AsyncModelRunnerOutput):
    def __init__(self, model_runner_output, sampler_output, num_sampled_tokens, main_stream,
                 copy_stream, num_draft_tokens=None):
        self.model_runner_output = model_runner_output
        self.sampler_output = sampler_output
        self.num_sampled_tokens = num_sampled_tokens
        # Blocking (sleep) event to avoid busy-polling the CUDA driver lock.
        self.copy_event = torch.cuda.Event(blocking=True)
        with stream(copy_stream, main_stream):
            copy_stream.wait_stream(main_stream)
            self.sampled_token_ids = async_copy_to_np(sampler_output.width)
            self.num_sampled_tokens_np = async_copy_to_np(1)
            self.copy_event.record(copy_stream)
        # Workload bookkeeping (not vLLM's): whose step this output is.
        self._truth_cycle = simgpu.TRUTH.cycle
        self._truth_tid = threading.get_native_id()

    def get_output(self):
        with at_cycle_of("spec.output", self._truth_cycle, self._truth_tid):
            self.copy_event.synchronize()
            self.copy_event.destroy()  # torch destroys it with this object
        sampled_token_ids = [list(self.sampled_token_ids)]
        num_sampled_tokens = list(self.num_sampled_tokens_np)
        for token_ids, num_tokens in zip(sampled_token_ids, num_sampled_tokens):
            del token_ids[num_tokens:]
        self.model_runner_output.sampled_token_ids = sampled_token_ids
        return self.model_runner_output


def async_copy_to_np(width):
    gpu = simgpu.GPU
    host = (ctypes.c_int32 * width)()
    gpu.cuda.dtoh(host, gpu.buf, stream=gpu.cur_stream, sync=False)
    return host


@contextlib.contextmanager
def stream(to_stream, from_stream):
    """Lightweight torch.cuda.stream(): set the current stream, restore it."""
    gpu = simgpu.GPU
    prev = gpu.cur_stream
    try:
        gpu.cur_stream = to_stream.handle
        yield
    finally:
        gpu.cur_stream = prev
