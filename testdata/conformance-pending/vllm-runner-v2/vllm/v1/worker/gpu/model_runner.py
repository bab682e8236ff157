"""vllm/v1/worker/gpu/model_runner.py: model runner V2 (GPUModelRunner), written from
vllm-project/vllm vllm/v1/worker/gpu/model_runner.py (see conformance.yaml).

execute_model updates the request states, prepares the inputs and attention on the device,
and runs the target forward itself: cudagraph_manager.run_fullgraph (uniform decode batches),
run_pw_graph (PIECEWISE) or self.model(...) (eager); it returns None. sample_tokens then runs
sample() (compute_logits, then the Sampler or the RejectionSampler), starts the host copy of the
sampled tokens (AsyncOutput), updates the request states (postprocess_sampled) and proposes the
next drafts (speculator.propose); it returns the AsyncOutput."""


import torch

import simgpu
from simgpu import at
from vllm.forward_context import FULL, NONE, PIECEWISE, set_forward_context
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.gpu import input_batch as ib
from vllm.v1.worker.gpu.async_utils import AsyncOutput
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cudagraph_utils import ModelCudaGraphManager
from vllm.v1.worker.gpu.eplb_utils import step_eplb_after
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states import init_model_state
from vllm.v1.worker.gpu.sample.sampler import Sampler
from vllm.v1.worker.gpu.spec_decode import init_speculator
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler
from vllm.v1.worker.gpu.spec_decode.utils import DraftTokensHandler


class ExecuteModelState(object):
    def __init__(self, input_batch, attn_metadata, slot_mappings_by_layer, hidden_states,
                 aux_hidden_states, finished_req_ids):
        self.input_batch = input_batch
        self.attn_metadata = attn_metadata
        self.slot_mappings_by_layer = slot_mappings_by_layer
        self.hidden_states = hidden_states
        self.aux_hidden_states = aux_hidden_states
        self.finished_req_ids = finished_req_ids


class _AttnMetadata(object):
    def __init__(self, decode):
        self.decode = decode


class GPUModelRunner(object):
    def __init__(self, vllm_config, device=None):
        self.vllm_config = vllm_config
        self.device = device
        self.output_copy_stream = torch.cuda.Stream()
        self.main_stream = torch.cuda.current_stream()
        self.num_speculative_steps = vllm_config.num_speculative_tokens
        self.speculator = init_speculator(vllm_config, device)
        self.use_aux_hidden_state_outputs = True  # eagle3
        # Draft tokens propagation - for spec-dec + struct outputs.
        self.draft_tokens_handler = DraftTokensHandler(device)
        self.block_tables = BlockTables()
        self.execute_model_state = None
        self.sampler = None
        self.rejection_sampler = None
        self.cudagraph_manager = None

    def load_model(self):
        from vllm.model_executor.models.llama import LlamaForCausalLM
        self.model = LlamaForCausalLM(self.vllm_config.num_layers)
        self.speculator.load_model(self.model)
        self.model_state = init_model_state(self.vllm_config)
        self.sampler = Sampler()
        self.rejection_sampler = RejectionSampler(self.num_speculative_steps)
        self.cudagraph_manager = ModelCudaGraphManager(self.vllm_config)
        self.speculator.init_cudagraph_manager()

    def capture_model(self):
        if self.vllm_config.mode != "graph":
            return
        self.cudagraph_manager.capture(self.model, lambda n: _AttnMetadata(n <= 4))
        self.speculator.capture()

    # ---- execute_model ----------------------------------------------------------------------

    def finish_requests(self, scheduler_output):
        pass

    def free_states(self, scheduler_output):
        pass

    def add_requests(self, scheduler_output):
        pass

    def update_requests(self, scheduler_output):
        pass

    def update_pp_decode_requests(self):
        pass

    def gather_batch_req_state(self, scheduler_output, dummy_run):
        n = scheduler_output.total_num_scheduled_tokens
        return scheduler_output, (n if scheduler_output.num_draft_tokens else None)

    def prepare_inputs(self, scheduler_output, batch_req_state, batch_desc):
        n = scheduler_output.total_num_scheduled_tokens
        num_draft = scheduler_output.num_draft_tokens
        has_prefill = num_draft == 0
        with at("spec.prepare"):
            if num_draft:
                ib.expand_idx_mapping(num_draft + 1)
            if has_prefill:
                ib.prepare_prefill_inputs(n)
            ib.prepare_pos_seq_lens(1)
            ib.combine_sampled_and_draft_tokens(1)
        return InputBatch(1, n, num_draft, has_prefill)

    def prepare_attn(self, input_batch):
        with at("spec.prepare"):
            block_tables = self.block_tables.gather_block_tables(input_batch.idx_mapping, 1)
            slot_mappings = self.block_tables.compute_slot_mappings(
                input_batch.idx_mapping, input_batch.query_start_loc, "positions",
                input_batch.num_tokens_after_padding)
        return block_tables, slot_mappings

    @torch.inference_mode()
    def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False,
                      skip_attn_for_dummy_run=False, is_profile=False, context_len=0):
        if not dummy_run:
            self.update_pp_decode_requests()
            self.finish_requests(scheduler_output)
            self.free_states(scheduler_output)
            self.add_requests(scheduler_output)
            self.update_requests(scheduler_output)
            if scheduler_output.total_num_scheduled_tokens == 0:
                # No need to run the model.
                return ModelRunnerOutput(req_ids=[], sampled_token_ids=[])
        simgpu.TRUTH.cycle += 1  # workload bookkeeping: one engine step begins
        batch_req_state, uniform_tok_count = self.gather_batch_req_state(scheduler_output,
                                                                         dummy_run)
        batch_desc = self.cudagraph_manager.dispatch(
            scheduler_output.total_num_scheduled_tokens, uniform_tok_count is not None)
        input_batch = self.prepare_inputs(scheduler_output, batch_req_state, batch_desc)
        block_tables, slot_mappings = self.prepare_attn(input_batch)
        self.model_state.preprocess_state(input_batch, block_tables)
        attn_metadata = self.model_state.prepare_attn(input_batch, batch_desc.cg_mode,
                                                      block_tables, slot_mappings)
        model_inputs = {
            "input_ids": "input_ids",
            "positions": "positions",
            "num_tokens": input_batch.num_tokens_after_padding,
        }
        model_inputs.update(self.model_state.prepare_inputs(input_batch))
        with at("spec.target_fwd"):
            if batch_desc.cg_mode == FULL:
                # The inputs are already in the graph's input buffers.
                model_output = self.cudagraph_manager.run_fullgraph(batch_desc)
            else:
                with set_forward_context(attn_metadata, self.vllm_config,
                                         num_tokens=input_batch.num_tokens_after_padding,
                                         cudagraph_runtime_mode=batch_desc.cg_mode):
                    if batch_desc.cg_mode == PIECEWISE:
                        model_output = self.cudagraph_manager.run_pw_graph(self.model,
                                                                           model_inputs)
                    else:
                        model_output = self.model(**model_inputs)
        hidden_states, aux_hidden_states = model_output, ["aux"]
        self.execute_model_state = ExecuteModelState(
            input_batch, attn_metadata, None, hidden_states, aux_hidden_states, set())
        return None

    # ---- sample_tokens ----------------------------------------------------------------------

    def sample(self, hidden_states, input_batch, grammar_output):
        gpu = simgpu.GPU
        with at("spec.sample_other"):
            gpu.launch("index_select", input_batch.num_tokens)  # hidden_states[logits_indices]
            with at("spec.logits"):
                logits = self.model.compute_logits("sample_hidden_states",
                                                   input_batch.num_draft_tokens + 1)
            if input_batch.num_draft_tokens == 0 or self.rejection_sampler is None:
                sampler_output = self.sampler(logits, input_batch)
            else:
                with at("spec.accept"):
                    sampler_output = self.rejection_sampler(logits, input_batch,
                                                            self.speculator.draft_logits)
        return sampler_output, sampler_output.num_sampled, sampler_output.num_rejected

    def postprocess_sampled(self, idx_mapping, sampled_tokens, num_sampled, num_rejected,
                            query_start_loc=None):
        with at("spec.bookkeep"):
            ib.post_update(1)
        self.model_state.postprocess_state(idx_mapping, num_sampled)

    @torch.inference_mode()
    @step_eplb_after()
    def sample_tokens(self, grammar_output):
        if self.execute_model_state is None:
            return None
        state = self.execute_model_state
        self.execute_model_state = None
        input_batch = state.input_batch
        sampler_output, num_sampled, num_rejected = self.sample(
            state.hidden_states, input_batch, grammar_output)
        model_runner_output = ModelRunnerOutput(req_ids=input_batch.req_ids,
                                                sampled_token_ids=None)
        # Start async output copy here so that it can overlap with speculator proposal.
        with at("step_other"):
            async_output = AsyncOutput(
                model_runner_output=model_runner_output,
                sampler_output=sampler_output,
                num_sampled_tokens=num_sampled,
                main_stream=self.main_stream,
                copy_stream=self.output_copy_stream,
            )
        self.postprocess_sampled(input_batch.idx_mapping, sampler_output.sampled_token_ids,
                                 num_sampled, num_rejected, input_batch.query_start_loc)
        if self.speculator is not None:
            with at("spec.draft"):
                draft_tokens = self.speculator.propose(
                    input_batch, state.attn_metadata, state.slot_mappings_by_layer,
                    state.hidden_states, state.aux_hidden_states, num_sampled, num_rejected,
                    "last_sampled_tokens", "next_prefill_tokens", "temperature", "seeds")
            with at("step_other"):
                simgpu.GPU.launch("index_put")  # req_states.draft_tokens[idx_mapping] = ...
        if self.num_speculative_steps > 0:
            with at("step_other"):
                simgpu.GPU.launch("index_select")  # req_states.draft_tokens[idx_mapping]
            self.draft_tokens_handler.set_draft_tokens(input_batch, self.num_speculative_steps)
        return async_output

    def take_draft_token_ids(self):
        return self.draft_tokens_handler.get_draft_tokens()
