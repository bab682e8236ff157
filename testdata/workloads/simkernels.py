"""The simulated model's kernels and their durations, and the per-thread GPU context.

Durations are a function of --kernel-us (b, µs):
    SMALL  0.25 b   bookkeeping / speculative-decoding helper kernels
    ELEM   1    b   embedding, norms, rotary, activation
    ATTN   2    b   attention (prefill/extend and decode kernels)
    GEMM   3    b   linear layers and lm_head; launched with cuLaunchKernelEx, as cuBLAS 12+ does
All-reduce time is the stand-in libnccl's (SPECPROF_SIM_NCCL_BASE_NS + bytes / bandwidth).
On the simulated GPU a graph replay costs the sum of its captured kernels plus the stand-in's
per-node gap.
"""

import ctypes

import fakecuda

SMALL, ELEM, ATTN, GEMM = 0.25, 1.0, 2.0, 3.0

# role -> (kernel symbol, duration multiplier, launched with cuLaunchKernelEx)
KERNELS = {
    # model
    "embedding": ("indexSelectLargeIndex", ELEM, False),
    "rmsnorm": ("RMSNormKernel", ELEM, False),
    "fused_add_rmsnorm": ("FusedAddRMSNormKernel", ELEM, False),
    "qkv_proj": ("nvjet_gemm_qkv_proj", GEMM, True),
    "rope": ("BatchQKApplyRotaryPosIdsCosSinCache", ELEM, False),
    "attn_extend": ("BatchPrefillWithPagedKVCacheKernel", ATTN, False),
    "attn_decode": ("BatchDecodeWithPagedKVCacheKernel", ATTN, False),
    "o_proj": ("nvjet_gemm_o_proj", GEMM, True),
    "gate_up_proj": ("nvjet_gemm_gate_up_proj", GEMM, True),
    "act_and_mul": ("act_and_mul_kernel", ELEM, False),
    "down_proj": ("nvjet_gemm_down_proj", GEMM, True),
    "lm_head": ("nvjet_gemm_lm_head", GEMM, True),
    # speculative decoding (EAGLE) helpers
    "assign_draft_cache_locs": ("assign_draft_cache_locs", SMALL, False),
    "seq_lens_sum": ("reduce_kernel_seq_lens_sum", SMALL, False),
    "select_top_k_tokens": ("select_top_k_tokens_kernel", SMALL, False),
    "fast_topk": ("fast_topk_kernel", SMALL, False),
    "organize_draft_results": ("organize_draft_results_kernel", SMALL, False),
    "build_tree": ("build_tree_efficient", SMALL, False),
    "assign_req_to_token_pool": ("assign_req_to_token_pool", SMALL, False),
    "verify_tree_greedy": ("verify_tree_greedy", SMALL, False),
    "create_extend_after_decode_spec_info": ("create_extend_after_decode_spec_info", SMALL, False),
    "spec_bookkeeping": ("spec_cycle_bookkeeping_kernel", SMALL, False),
    # --side-stream: verify's work on a second stream, overlapping the main stream's kernels
    # (the phase's GPU busy time is the union of the two, not their sum)
    "side_prefetch": ("kv_prefetch_side_stream_kernel", 4 * GEMM, False),
    # scheduler
    "write_req_to_token_pool": ("write_req_to_token_pool_triton", SMALL, False),
    "copy_next_token_ids": ("copy_next_token_ids_kernel", SMALL, False),
}


class Kernels(object):
    """All kernels loaded in one module (one cuModuleLoadData), durations set once."""

    def __init__(self, cuda, kernel_us):
        self.cuda = cuda
        cuda.load_module([sym for sym, _, _ in KERNELS.values()])
        self.table = {}
        self.durations_us = {}
        for role, (sym, mult, ex) in KERNELS.items():
            us = kernel_us * mult
            self.table[role] = (cuda.function(sym, us), ex)
            self.durations_us[role] = us


class SimGpu(object):
    """What one thread's model code needs: its stream, a stream to capture graphs on, the
    kernels, the NCCL communicator and device buffers. One per worker thread."""

    def __init__(self, cuda, kernels, stream, capture_stream, nccl=None, hidden=4096,
                 max_tokens=64):
        self.cuda = cuda
        self.kernels = kernels
        self.stream = stream
        self.capture_stream = capture_stream
        self.nccl = nccl
        self.hidden = hidden
        self.ar_buf = cuda.alloc(hidden * max_tokens * 2) if nccl is not None else 0
        self._table = kernels.table
        self._launch = cuda.launch
        # Graph capture redirects launches to the capture stream.
        self.cur_stream = stream
        self.side_stream = None  # --side-stream: a second stream (set by the workload)
        self._scratch = None     # replay_prepare's static buffers
        self._side_event = None

    def launch(self, role, tokens=1):
        fn, ex = self._table[role]
        self._launch(fn, self.cur_stream, ex, (max(1, tokens), 1, 1))

    def launch_side(self, role, tokens=1):
        """Launches on the side stream, starting when the main stream gets there (an event
        recorded on the main stream, waited for on the side one): its kernel then runs alongside
        the main stream's next kernels. No-op without a side stream, or while capturing."""
        if self.side_stream is None or self.cur_stream != self.stream:
            return
        if self._side_event is None:
            self._side_event = self.cuda.event()
        self.cuda.event_record(self._side_event, self.stream)
        self.cuda.stream_wait_event(self.side_stream, self._side_event)
        fn, ex = self._table[role]
        self._launch(fn, self.side_stream, ex, (max(1, tokens), 1, 1))

    def allreduce(self, count):
        self.nccl.allreduce(self.ar_buf, count, self.cur_stream)

    def sync(self):
        self.cuda.sync(self.cur_stream)

    def blocking_dtoh(self, dst, dptr, generic=False):
        """Blocking device-to-host copy, like tensor.tolist(): cuMemcpyDtoH_v2 when this thread
        computes on the legacy default stream, else an async copy on its stream
        (cuMemcpyDtoHAsync_v2, or with generic cuMemcpyAsync as torch makes it) followed by
        cuStreamSynchronize."""
        if self.stream == fakecuda.LEGACY_STREAM:
            self.cuda.dtoh(dst, dptr)
        else:
            self.cuda.dtoh(dst, dptr, stream=self.stream, sync=True, generic=generic)

    def replay_prepare(self, num_tokens):
        """What SGLang's graph runners do before a replay (replay_prepare): fill_ the static
        buffers the graph reads and copy_ the batch's inputs into them, a memset and a
        device-to-device copy on this thread's stream; plus a host-to-device copy of the
        batch's host-side positions (non_blocking)."""
        if self._scratch is None:
            self._scratch = (self.cuda.alloc(4 * 64), self.cuda.alloc(4 * 64))
            self._host_pos = (ctypes.c_int32 * 8)()
        dst, src = self._scratch
        n = max(1, min(64, num_tokens))
        self.cuda.memset_d32_async(dst, 0, n, self.cur_stream)
        self.cuda.dtod_async(dst, src, 4 * n, self.cur_stream)
        self.cuda.htod_async(src, self._host_pos, self.cur_stream)
