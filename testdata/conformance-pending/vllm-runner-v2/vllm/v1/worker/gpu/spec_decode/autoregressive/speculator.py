"""vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py: AutoRegressiveSpeculator.propose,
called from GPUModelRunner.sample_tokens: the draft prefill over the target's tokens (a FULL
graph for uniform decode batches, else _prefill through the model), then num_speculative_steps-1
draft decode steps (_multi_step_decode: slot mappings, then a FULL graph replay or
_generate_draft)."""

import torch

import simgpu
from vllm.forward_context import FULL, NONE, PIECEWISE, set_forward_context
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.spec_decode.autoregressive.cudagraph_utils import (
    SpeculatorCudaGraphManager,
)
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class _AttnMetadata(object):
    def __init__(self, decode):
        self.decode = decode


class AutoRegressiveSpeculator(DraftModelSpeculator):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self.block_tables = BlockTables()
        self.prefill_cudagraph_manager = None
        self.decode_cudagraph_manager = None

    def init_cudagraph_manager(self):
        k = self.num_speculative_steps
        cfg = self.vllm_config
        # Draft prefill: FULL for uniform decode batches (k+1 tokens per request), PIECEWISE
        # otherwise; draft decodes: FULL_DECODE_ONLY (one token per request).
        self.prefill_cudagraph_manager = SpeculatorCudaGraphManager(
            cfg, [k + 1], [s for s in cfg.piecewise_sizes if s > 1])
        self.decode_cudagraph_manager = SpeculatorCudaGraphManager(cfg, [1], [])

    def capture(self):
        self.prefill_cudagraph_manager.capture_piecewise(self.model, lambda n: _AttnMetadata(False))
        self.prefill_cudagraph_manager.capture(
            lambda n, md: self._prefill(1, n, md, None, None, NONE), lambda n: _AttnMetadata(True))
        if self.num_speculative_steps == 1:
            return
        self.decode_cudagraph_manager.capture(
            lambda n, md: self._generate_draft(1, n, md, None, None, NONE),
            lambda n: _AttnMetadata(True))

    @torch.inference_mode()
    def propose(self, input_batch, attn_metadata, slot_mappings, last_hidden_states,
                aux_hidden_states, num_sampled, num_rejected, last_sampled, next_prefill_tokens,
                temperature, seeds, dp_sync=None, dummy_run=False, skip_attn_for_dummy_run=False,
                mm_inputs=None, is_profile=False):
        gpu = simgpu.GPU
        num_tokens = input_batch.num_tokens
        num_reqs = input_batch.num_reqs
        if aux_hidden_states:
            gpu.launch("index_select", num_tokens)  # torch.cat(aux_hidden_states, dim=-1)
            self.model.combine_hidden_states(None, num_tokens)
        gpu.launch("index_put", num_tokens)  # self.hidden_states[:n].copy_(hidden_states)
        self._copy_request_inputs(num_reqs)
        gpu.launch("draft_prepare_prefill", num_reqs)  # prepare_prefill_inputs
        uniform = not input_batch.has_prefill
        prefill_batch_desc = self.prefill_cudagraph_manager.dispatch(num_tokens, uniform)
        if prefill_batch_desc.cg_mode == FULL:
            self.prefill_cudagraph_manager.run_fullgraph(prefill_batch_desc)
        else:
            self._prefill(num_reqs, prefill_batch_desc.num_tokens, attn_metadata, slot_mappings,
                          None, prefill_batch_desc.cg_mode)
        if self.num_speculative_steps == 1:
            return "draft_tokens"
        gpu.launch("draft_prepare_decode", num_reqs + 1)  # prepare_decode_inputs
        decode_batch_desc = self.decode_cudagraph_manager.dispatch(num_reqs, True)
        self._multi_step_decode(num_reqs, False, decode_batch_desc, None, None)
        return "draft_tokens"

    def _copy_request_inputs(self, num_reqs):
        simgpu.GPU.launch("index_select", num_reqs)  # temperature / seeds by idx_mapping

    @torch.inference_mode()
    def _run_model(self, num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp,
                   cudagraph_runtime_mode=NONE, mm_inputs=None):
        with set_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens,
                                 cudagraph_runtime_mode=cudagraph_runtime_mode):
            model_inputs = dict(input_ids=None, positions=None, hidden_states=None,
                                num_tokens=num_tokens)
            if cudagraph_runtime_mode == PIECEWISE:
                ret = self.prefill_cudagraph_manager.run_pw_graph(self.model, model_inputs)
            else:
                ret = self.model(**model_inputs)
        return ret, ret

    def _prefill(self, num_reqs, num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp,
                 cudagraph_runtime_mode=NONE, mm_inputs=None):
        gpu = simgpu.GPU
        last_hidden_states, hidden_states = self._run_model(
            num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp,
            cudagraph_runtime_mode)
        gpu.launch("index_select", num_reqs)  # last_hidden_states[last_token_indices]
        self.sample_draft("sample_hidden_states", num_reqs)
        gpu.launch("index_put", num_reqs)  # self.hidden_states[:num_reqs] = ...

    def _multi_step_decode(self, num_reqs, skip_attn, batch_desc, num_tokens_across_dp,
                           seq_lens_cpu_upper_bound):
        gpu = simgpu.GPU
        for step in range(1, self.num_speculative_steps):
            self.block_tables.compute_slot_mappings("idx_mapping", "query_start_loc",
                                                    "positions", batch_desc.num_tokens)
            attn_metadata = _AttnMetadata(True)
            gpu.launch("draft_positions")  # self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == FULL:
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._generate_draft(num_reqs, batch_desc.num_tokens, attn_metadata, None, None,
                                     batch_desc.cg_mode)

    def _generate_draft(self, num_reqs, num_tokens_padded, attn_metadata, slot_mappings,
                        num_tokens_across_dp, cudagraph_runtime_mode=NONE):
        last_hidden_states, hidden_states = self._run_model(
            num_tokens_padded, attn_metadata, slot_mappings, num_tokens_across_dp,
            cudagraph_runtime_mode)
        self.sample_draft("sample_hidden_states", num_reqs)
        simgpu.GPU.launch("draft_input_ids", num_reqs)  # update_draft_inputs
