"""Mirrors sglang/srt/model_executor/model_runner.py (ModelRunner).

Also holds the --stack-depth helper: `nested_module_call` recurses D times before each driver or
NCCL call, like nn.Module nesting (Module._call_impl -> forward -> ...), so that the profiler's
frame walk has to traverse D extra pure-Python frames between a phase function and the call.
"""

import functools

from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.models.llama import LlamaForCausalLM


def nested_module_call(depth, fn, *args):
    if depth <= 1:
        return fn(*args)
    return nested_module_call(depth - 1, fn, *args)


def set_stack_depth(cuda, depth):
    """Installs `depth` frames of nested_module_call around every driver/NCCL call of `cuda`
    (functools.partial is a C callable: it adds no Python frame of its own)."""
    if depth > 0:
        cuda.wrap = functools.partial(nested_module_call, depth)


class ModelRunner(object):
    def __init__(self, server_args, gpu, num_layers, is_draft_worker=False, tp_group=None):
        self.server_args = server_args
        self.gpu = gpu
        self.is_draft_worker = is_draft_worker
        self.model = LlamaForCausalLM(gpu, num_layers, None if is_draft_worker else tp_group,
                                      server_args.hidden_size)
        self.graph_runner = None
        # The draft model runner never gets a CudaGraphRunner: EAGLE captures its own graphs.
        if not is_draft_worker and not server_args.disable_cuda_graph:
            self.init_cuda_graphs()

    def init_cuda_graphs(self):
        self.graph_runner = CudaGraphRunner(self)

    def forward(self, forward_batch, skip_attn_backend_init=False):
        return self._forward_raw(forward_batch, skip_attn_backend_init)

    def _forward_raw(self, forward_batch, skip_attn_backend_init=False):
        can_run_cuda_graph = bool(self.graph_runner is not None
                                  and self.graph_runner.can_run(forward_batch))
        if can_run_cuda_graph:
            ret = self.graph_runner.replay(forward_batch,
                                           skip_attn_backend_init=skip_attn_backend_init)
        elif ForwardMode.is_decode(forward_batch.forward_mode):
            ret = self.forward_decode(forward_batch)
        else:
            ret = self.forward_extend(forward_batch)
        return ret, can_run_cuda_graph

    def forward_decode(self, forward_batch):
        return self.model.forward(forward_batch)

    def forward_extend(self, forward_batch, skip_attn_backend_init=False):
        return self.model.forward(forward_batch)
