"""The simulated GPU and the ground truth shared by this workload's modules.

Not part of the vLLM tree (its file name matches no preset rule): the vllm/ and torch/ modules
call into it for every driver call, so that the innermost Python frames of a call are the vLLM
(or torch) function that makes it, as in the real server.

Ground truth (testdata/conformance/README.md): `at(phase)` labels the calls of the block with
the phase and the main thread's current cycle; `at_outside(phase)` with the phase alone;
`at_cycle_of(phase, cycle, tid)` with another thread's cycle.
"""

import contextlib
import ctypes
import threading

import fakecuda
from fakecuda import tag, truth_tag

# kernel name -> duration in µs on the simulated GPU
KERNELS = {
    # target model (Llama)
    "embedding": ("indexSelectLargeIndex", 4.0),
    "rmsnorm": ("rms_norm_kernel", 4.0),
    "qkv_proj": ("nvjet_tst_qkv_proj", 12.0),
    "rope": ("rotary_embedding_kernel", 4.0),
    "attn_prefill": ("flash_fwd_splitkv_kernel_prefill", 10.0),
    "attn_decode": ("flash_fwd_splitkv_kernel", 8.0),
    "reshape_and_cache": ("reshape_and_cache_flash_kernel", 2.0),
    "o_proj": ("nvjet_tst_o_proj", 12.0),
    "gate_up_proj": ("nvjet_tst_gate_up_proj", 12.0),
    "act_and_mul": ("act_and_mul_kernel", 4.0),
    "down_proj": ("nvjet_tst_down_proj", 12.0),
    "lm_head": ("nvjet_tst_lm_head", 14.0),
    "index_select": ("index_elementwise_kernel", 1.0),
    "argmax": ("argmax_reduce_kernel", 2.0),
    "softmax": ("softmax_warp_forward", 2.0),
    # runner input preparation (triton / torch)
    "prepare_input_ids": ("_prepare_input_ids_kernel", 1.0),
    "positions": ("elementwise_kernel_positions", 1.0),
    "slot_mapping": ("_compute_slot_mapping_kernel", 1.0),
    "seq_lens": ("elementwise_kernel_seq_lens", 1.0),
    "spec_decode_metadata": ("_calc_spec_decode_metadata_kernel", 1.0),
    # sampling
    "sample_argmax": ("sampler_argmax_kernel", 2.0),
    "rejection_greedy": ("rejection_greedy_sample_kernel", 2.0),
    "rejection_random": ("rejection_random_sample_kernel", 2.0),
    "sample_recovered": ("sample_recovered_tokens_kernel", 2.0),
    "bonus_sample": ("bonus_token_argmax_kernel", 1.0),
    # drafting (EAGLE)
    "eagle_next_token": ("eagle_prepare_next_token_padded_kernel", 1.0),
    "eagle_inputs_padded": ("eagle_prepare_inputs_padded_kernel", 1.0),
    "draft_input_ids": ("draft_input_ids_copy_kernel", 1.0),
    "combine_hidden": ("nvjet_tst_fc_combine_hidden", 6.0),
    "draft_positions": ("draft_positions_update_kernel", 1.0),
    # V2 helpers
    "combine_sampled_and_draft": ("_combine_sampled_and_draft_tokens_kernel", 1.0),
    "prepare_pos_seq_lens": ("_prepare_pos_seq_lens_kernel", 1.0),
    "gather_block_tables": ("_gather_block_tables_kernel", 1.0),
    "compute_slot_mappings": ("_compute_slot_mappings_kernel", 1.0),
    "post_update": ("_post_update_kernel", 1.0),
    "draft_prepare_prefill": ("_prepare_eagle_inputs_kernel", 1.0),
    "draft_prepare_decode": ("_prepare_eagle_decode_kernel", 1.0),
    "index_put": ("index_put_kernel", 1.0),
    "gumbel": ("_gumbel_sample_kernel", 2.0),
}


class Gpu(object):
    """One process's simulated device: the context, the kernels, the default (legacy) stream
    the model runs on, and the stream captures run on."""

    def __init__(self):
        self.cuda = fakecuda.Cuda()
        self.cuda.load_module([sym for sym, _ in KERNELS.values()])
        self.fn = {}
        for role, (sym, us) in KERNELS.items():
            self.fn[role] = self.cuda.function(sym, us)
        self.stream = fakecuda.LEGACY_STREAM
        self.cur_stream = self.stream
        self.capture_stream = self.cuda.stream()
        self.buf = self.cuda.alloc(1 << 16)
        self._destroy = self.cuda.lib.cuEventDestroy_v2
        self._destroy.restype = ctypes.c_int
        self._destroy.argtypes = [ctypes.c_void_p]

    def launch(self, role, tokens=1):
        self.cuda.launch(self.fn[role], self.cur_stream, False, (max(1, tokens), 1, 1))

    def gemm(self, role, tokens=1):
        """cuBLAS 12 launches its GEMMs with cuLaunchKernelEx."""
        self.cuda.launch(self.fn[role], self.cur_stream, True, (max(1, tokens), 1, 1))

    def destroy_event(self, ev):
        rc = self._destroy(ev)
        if rc != 0:
            raise RuntimeError("cuEventDestroy_v2 failed: CUresult %d" % rc)


GPU = None  # set by the workload's main


class Truth(object):
    """The main thread's cycle count: one engine step (execute_model and the sample_tokens, and
    take_draft_token_ids, that follow it) is one cycle."""

    def __init__(self):
        self.cycle = 0
        self.main_tid = threading.get_native_id()


TRUTH = Truth()


def at(phase):
    """Calls of the block belong to the main thread's current cycle (0: outside cycles)."""
    c = TRUTH.cycle
    return tag(truth_tag(phase, c if c > 0 else None))


def at_outside(phase):
    return tag(truth_tag(phase))


def at_cycle_of(phase, cycle, tid):
    """Calls of the block belong to cycle `cycle` of thread `tid` (the calling thread's own
    cycle when tid is the calling thread)."""
    if tid == threading.get_native_id():
        return tag(truth_tag(phase, cycle))
    return tag(truth_tag(phase, cycle, tid))


@contextlib.contextmanager
def nothing():
    yield
