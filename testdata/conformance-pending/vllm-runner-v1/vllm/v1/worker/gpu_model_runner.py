"""vllm/v1/worker/gpu_model_runner.py: model runner V1 (GPUModelRunner), written from
vllm-project/vllm vllm/v1/worker/gpu_model_runner.py (see conformance.yaml).

One engine step is two calls from the worker: execute_model (input preparation under
synchronize_input_prep, the target forward in _model_forward, then compute_logits) returns
None, and sample_tokens (_sample, drafting through the propose_draft_token_ids closure,
_bookkeeping_sync; with async scheduling an AsyncGPUModelRunnerOutput whose host copy the output
thread waits for). With synchronous scheduling the engine then asks for the drafts
(take_draft_token_ids)."""

import contextlib
import ctypes
import threading

import torch

import simgpu
from simgpu import at, at_cycle_of
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.forward_context import FULL, NONE, PIECEWISE, set_forward_context
from vllm.v1.outputs import AsyncModelRunnerOutput, ModelRunnerOutput
from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.sample.sampler import Sampler
from vllm.v1.spec_decode.eagle import EagleProposer


@contextlib.contextmanager
def record_function_or_nullcontext(name):
    yield


class AsyncGPUModelRunnerOutput(AsyncModelRunnerOutput):
    """The output of a step with async scheduling: the sampled tokens are copied to the host on a
    separate stream after the default stream's work (wait_stream), and an event recorded there
    tells get_output when the copy is done."""

    def __init__(self, model_runner_output, sampled_token_ids, logprobs_tensors,
                 invalid_req_indices, async_output_copy_stream, vocab_size):
        self._model_runner_output = model_runner_output
        self._invalid_req_indices = invalid_req_indices
        self.async_copy_ready_event = torch.cuda.Event(blocking=True)
        self._sampled_token_ids = sampled_token_ids
        self.vocab_size = vocab_size
        default_stream = torch.cuda.current_stream()
        gpu = simgpu.GPU
        with torch.cuda.stream(async_output_copy_stream):
            async_output_copy_stream.wait_stream(default_stream)
            self.sampled_token_ids_cpu = (ctypes.c_int32 * sampled_token_ids.width)()
            gpu.cuda.dtoh(self.sampled_token_ids_cpu, gpu.buf, stream=gpu.cur_stream, sync=False)
            self.async_copy_ready_event.record()
        # Workload bookkeeping (not vLLM's): whose step this output is.
        self._truth_cycle = simgpu.TRUTH.cycle
        self._truth_tid = threading.get_native_id()

    def get_output(self):
        with at_cycle_of("spec.output", self._truth_cycle, self._truth_tid):
            self.async_copy_ready_event.synchronize()
            # The event goes with this object (torch destroys it when it is freed).
            self.async_copy_ready_event.destroy()
        output = self._model_runner_output
        if self._sampled_token_ids.width == 1:
            output.sampled_token_ids = [list(self.sampled_token_ids_cpu)]
        else:
            output.sampled_token_ids = [list(self.sampled_token_ids_cpu)]
        return output


class ExecuteModelState(object):
    def __init__(self, scheduler_output, logits, spec_decode_metadata,
                 spec_decode_common_attn_metadata, hidden_states, sample_hidden_states,
                 aux_hidden_states):
        self.scheduler_output = scheduler_output
        self.logits = logits
        self.spec_decode_metadata = spec_decode_metadata
        self.spec_decode_common_attn_metadata = spec_decode_common_attn_metadata
        self.hidden_states = hidden_states
        self.sample_hidden_states = sample_hidden_states
        self.aux_hidden_states = aux_hidden_states


class SpecDecodeMetadata(object):
    def __init__(self, num_draft_tokens):
        self.num_draft_tokens = num_draft_tokens


class CommonAttentionMetadata(object):
    def __init__(self, num_tokens, decode):
        self.num_actual_tokens = num_tokens
        self.decode = decode

    def decode_view(self):
        return CommonAttentionMetadata(1, True)


class GPUModelRunner(object):
    def __init__(self, vllm_config, device=None):
        self.vllm_config = vllm_config
        self.use_async_scheduling = vllm_config.async_scheduling
        self.num_spec_tokens = vllm_config.num_speculative_tokens
        self.use_aux_hidden_state_outputs = True  # EAGLE3
        self.execute_model_state = None
        self.sampler = Sampler()
        self.rejection_sampler = RejectionSampler(self.sampler)
        self.drafter = EagleProposer(vllm_config, device, self)
        self.async_output_copy_stream = None
        # Ensures the CPU input buffers of a step are not overwritten while the previous
        # step's host-to-device copies still read them (async scheduling).
        self.prepare_inputs_event = torch.cuda.Event() if self.use_async_scheduling else None
        self.transfer_event = torch.cuda.Event()
        self.draft_token_ids_copy_stream = torch.cuda.Stream()
        self.draft_token_ids_event = torch.cuda.Event()
        self.valid_sampled_token_count_event = None
        self.valid_sampled_token_count_copy_stream = None
        if self.use_async_scheduling and self.num_spec_tokens:
            self.valid_sampled_token_count_event = torch.cuda.Event()
            self.valid_sampled_token_count_copy_stream = torch.cuda.Stream()
        self._draft_token_ids = None
        self._draft_token_req_ids = None
        self.input_batch = _InputBatch()

    # ---- startup ----------------------------------------------------------------------------

    def load_model(self):
        from vllm.model_executor.models.llama import LlamaForCausalLM
        self.model = LlamaForCausalLM(self.vllm_config.num_layers)
        self.drafter.load_model(self.model)
        if self.vllm_config.mode == "graph":
            # FULL_AND_PIECEWISE: uniform decode batches replay one full graph.
            self.model = CUDAGraphWrapper(self.model, FULL)

    def capture_model(self):
        if self.vllm_config.mode != "graph":
            return
        for n in self.vllm_config.piecewise_sizes:
            self._dummy_run(n, PIECEWISE)
        for n in self.vllm_config.full_sizes:
            self._dummy_run(n, FULL)
        for n in self.vllm_config.piecewise_sizes:
            self.drafter.dummy_run(n)

    def _dummy_run(self, num_tokens, cudagraph_runtime_mode):
        with set_forward_context(CommonAttentionMetadata(num_tokens, num_tokens <= 4),
                                 self.vllm_config, num_tokens=num_tokens,
                                 cudagraph_runtime_mode=cudagraph_runtime_mode):
            self.model(input_ids=None, positions=None, num_tokens=num_tokens)

    # ---- execute_model ----------------------------------------------------------------------

    @contextlib.contextmanager
    def synchronize_input_prep(self):
        if self.prepare_inputs_event is None:
            yield
            return
        # Ensure prior step has finished with reused CPU tensors.
        with at("spec.prepare"):
            self.prepare_inputs_event.synchronize()
        try:
            yield
        finally:
            with at("spec.prepare"):
                self.prepare_inputs_event.record()

    def _update_states(self, scheduler_output):
        # The persistent batch: added/removed requests, new blocks (host-side here).
        self.input_batch.update(scheduler_output)

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens_np):
        gpu = simgpu.GPU
        n = scheduler_output.total_num_scheduled_tokens
        with at("spec.prepare"):
            # input ids (with the previous step's sampled tokens on the device under async
            # scheduling), positions, slot mapping
            gpu.launch("prepare_input_ids", n)
            gpu.launch("positions", n)
            gpu.launch("slot_mapping", n)
            spec_decode_metadata = None
            if scheduler_output.num_draft_tokens:
                spec_decode_metadata = self._calc_spec_decode_metadata(
                    scheduler_output.num_draft_tokens)
        return "logits_indices", spec_decode_metadata

    def _calc_spec_decode_metadata(self, num_draft_tokens):
        with at("spec.prepare"):
            simgpu.GPU.launch("spec_decode_metadata", num_draft_tokens + 1)
        return SpecDecodeMetadata(num_draft_tokens)

    def _build_attention_metadata(self, num_tokens, decode):
        with at("spec.prepare"):
            simgpu.GPU.launch("seq_lens", num_tokens)
        return CommonAttentionMetadata(num_tokens, decode)

    def _preprocess(self, scheduler_output, num_input_tokens):
        with at("spec.prepare"):
            # Clamp speculative scheduler placeholders (-1) before embedding lookup.
            simgpu.GPU.launch("index_put", num_input_tokens)
        return "input_ids", None, "positions", None, {}

    def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None,
                       inputs_embeds=None, num_tokens=1, **model_kwargs):
        with at("spec.target_fwd"):
            return self.model(input_ids=input_ids, positions=positions,
                              intermediate_tensors=intermediate_tensors,
                              inputs_embeds=inputs_embeds, num_tokens=num_tokens)

    @torch.inference_mode()
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        if self.execute_model_state is not None:
            raise RuntimeError("State error: sample_tokens() must be called "
                               "after execute_model() returns None.")
        simgpu.TRUTH.cycle += 1  # workload bookkeeping: one engine step begins
        n = scheduler_output.total_num_scheduled_tokens
        decode = scheduler_output.num_draft_tokens > 0
        with record_function_or_nullcontext("gpu_model_runner: preprocess"), \
                self.synchronize_input_prep():
            self._update_states(scheduler_output)
            logits_indices, spec_decode_metadata = self._prepare_inputs(scheduler_output, None)
            attn_metadata = self._build_attention_metadata(n, decode)
            spec_decode_common_attn_metadata = attn_metadata
            input_ids, inputs_embeds, positions, intermediate_tensors, model_kwargs = \
                self._preprocess(scheduler_output, n)
        # FULL graphs for uniform decode batches, PIECEWISE for the rest (FULL_AND_PIECEWISE);
        # NONE with enforce_eager.
        if self.vllm_config.mode != "graph":
            cudagraph_mode = NONE
        elif n in self.vllm_config.full_sizes and decode:
            cudagraph_mode = FULL
        else:
            cudagraph_mode = PIECEWISE
        with set_forward_context(attn_metadata, self.vllm_config, num_tokens=n,
                                 cudagraph_runtime_mode=cudagraph_mode), \
                record_function_or_nullcontext("gpu_model_runner: forward"):
            self._model_forward(input_ids=input_ids, positions=positions, num_tokens=n)
        with record_function_or_nullcontext("gpu_model_runner: postprocess"):
            hidden_states, aux_hidden_states = "hidden_states", ["aux"]
            gpu = simgpu.GPU
            with at("step_other"):
                gpu.launch("index_select", n)  # sample_hidden_states = hidden_states[logits_indices]
            with at("spec.logits"):
                logits = self.model.compute_logits("sample_hidden_states")
        self.execute_model_state = ExecuteModelState(
            scheduler_output, logits, spec_decode_metadata, spec_decode_common_attn_metadata,
            hidden_states, "sample_hidden_states", aux_hidden_states)
        return None

    # ---- sample_tokens ----------------------------------------------------------------------

    def _sample(self, logits, spec_decode_metadata):
        with at("spec.sample_other"):
            if spec_decode_metadata is None:
                return self.sampler(logits=logits, sampling_metadata=None)
            with at("spec.accept"):
                return self.rejection_sampler(spec_decode_metadata, None, logits, None)

    @torch.inference_mode
    def sample_tokens(self, grammar_output):
        state = self.execute_model_state
        self.execute_model_state = None
        scheduler_output = state.scheduler_output
        spec_decode_metadata = state.spec_decode_metadata
        spec_decode_common_attn_metadata = state.spec_decode_common_attn_metadata
        hidden_states = state.hidden_states
        sample_hidden_states = state.sample_hidden_states
        aux_hidden_states = state.aux_hidden_states

        with record_function_or_nullcontext("gpu_model_runner: sample"):
            sampler_output = self._sample(state.logits, spec_decode_metadata)

        self._draft_token_ids = None
        self._draft_token_req_ids = None

        def propose_draft_token_ids(sampled_token_ids):
            with record_function_or_nullcontext("gpu_model_runner: draft"):
                self._draft_token_ids = self.propose_draft_token_ids(
                    scheduler_output, sampled_token_ids, None, hidden_states,
                    sample_hidden_states, aux_hidden_states, spec_decode_metadata,
                    spec_decode_common_attn_metadata)
                self._copy_draft_token_ids_to_cpu(scheduler_output)

        # EAGLE drafts from the sampled tokens on the device: before bookkeeping.
        propose_draft_token_ids(sampler_output.sampled_token_ids)

        with record_function_or_nullcontext("gpu_model_runner: bookkeep"):
            valid_sampled_token_ids, invalid_req_indices = self._bookkeeping_sync(
                scheduler_output, sampler_output)

        output = ModelRunnerOutput(req_ids=["req-0"], sampled_token_ids=valid_sampled_token_ids)
        if not self.use_async_scheduling:
            return output
        with at("step_other"):
            async_output = AsyncGPUModelRunnerOutput(
                model_runner_output=output,
                sampled_token_ids=sampler_output.sampled_token_ids,
                logprobs_tensors=None,
                invalid_req_indices=invalid_req_indices,
                async_output_copy_stream=self._get_or_create_async_output_copy_stream(),
                vocab_size=32000,
            )
        return async_output

    def _get_or_create_async_output_copy_stream(self):
        if self.async_output_copy_stream is None:
            self.async_output_copy_stream = torch.cuda.Stream()
        return self.async_output_copy_stream

    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids, sampling_metadata,
                                hidden_states, sample_hidden_states, aux_hidden_states,
                                spec_decode_metadata, common_attn_metadata):
        gpu = simgpu.GPU
        n = scheduler_output.total_num_scheduled_tokens
        with at("spec.draft"):
            next_token_ids, valid_sampled_tokens_count = \
                self.drafter.prepare_next_token_ids_padded(sampled_token_ids, None, None, None)
            self._copy_valid_sampled_token_count(next_token_ids, valid_sampled_tokens_count)
            if spec_decode_metadata is not None:
                common_attn_metadata, token_indices_to_sample, _ = \
                    self.drafter.prepare_inputs_padded(common_attn_metadata, spec_decode_metadata,
                                                       valid_sampled_tokens_count)
            # EAGLE3: the target's auxiliary hidden states, concatenated
            gpu.launch("index_select", n)  # torch.cat(aux_hidden_states, dim=-1)
            return self.drafter.propose(
                target_token_ids=None, target_positions=None, target_hidden_states=None,
                next_token_ids=next_token_ids, token_indices_to_sample=None,
                sampling_metadata=sampling_metadata, common_attn_metadata=common_attn_metadata,
                num_tokens=n)

    def _copy_valid_sampled_token_count(self, next_token_ids, valid_sampled_tokens_count):
        if self.valid_sampled_token_count_event is None:
            return
        gpu = simgpu.GPU
        default_stream = torch.cuda.current_stream()
        with at("spec.draft"), torch.cuda.stream(self.valid_sampled_token_count_copy_stream):
            self.valid_sampled_token_count_copy_stream.wait_stream(default_stream)
            counts = (ctypes.c_int32 * 1)()
            gpu.cuda.dtoh(counts, gpu.buf, stream=gpu.cur_stream, sync=False)
            self.valid_sampled_token_count_event.record()

    def _copy_draft_token_ids_to_cpu(self, scheduler_output, zeros_only=False):
        # With async scheduling the drafts stay on the device (no structured outputs or
        # penalties here).
        if self.use_async_scheduling:
            return
        self._draft_token_req_ids = ["req-0"]
        gpu = simgpu.GPU
        default_stream = torch.cuda.current_stream()
        with at("spec.draft"), torch.cuda.stream(self.draft_token_ids_copy_stream):
            self.draft_token_ids_copy_stream.wait_stream(default_stream)
            self.draft_token_ids_cpu = (ctypes.c_int32 * self.num_spec_tokens)()
            gpu.cuda.dtoh(self.draft_token_ids_cpu, gpu.buf, stream=gpu.cur_stream, sync=False)
            self.draft_token_ids_event.record()

    def _to_list(self, sampled_token_ids):
        # A pinned host buffer and an event: the copy waits for the default stream's work,
        # the event wait for the copy, without a stream synchronize.
        gpu = simgpu.GPU
        pinned = (ctypes.c_int32 * sampled_token_ids.width)()
        gpu.cuda.dtoh(pinned, gpu.buf, stream=gpu.stream, sync=False)
        self.transfer_event.record()
        self.transfer_event.synchronize()
        return [list(pinned)]

    def _bookkeeping_sync(self, scheduler_output, sampler_output):
        sampled_token_ids = sampler_output.sampled_token_ids
        invalid_req_indices = []
        with at("spec.bookkeep"):
            if not self.use_async_scheduling:
                max_gen_len = sampled_token_ids.shape[-1]
                if max_gen_len == 1:
                    valid_sampled_token_ids = self._to_list(sampled_token_ids)
                else:
                    valid_sampled_token_ids, _ = RejectionSampler.parse_output(
                        sampled_token_ids, 32000, [])
            else:
                # Cached on the device for the next step's inputs: no host sync.
                valid_sampled_token_ids = []
        self.input_batch.record_sampled(valid_sampled_token_ids)
        return valid_sampled_token_ids, invalid_req_indices

    # ---- take_draft_token_ids ---------------------------------------------------------------

    def take_draft_token_ids(self):
        if not self.num_spec_tokens or not self._draft_token_req_ids:
            return None
        draft_token_ids, req_ids = self._get_draft_token_ids_cpu()
        return DraftTokenIds(req_ids, draft_token_ids)

    def _get_draft_token_ids_cpu(self):
        req_ids = self._draft_token_req_ids
        if req_ids is None:
            return [], []
        with at("spec.bookkeep"):
            self.draft_token_ids_event.synchronize()
        return [list(self.draft_token_ids_cpu)], req_ids


class DraftTokenIds(object):
    def __init__(self, req_ids, draft_token_ids):
        self.req_ids = req_ids
        self.draft_token_ids = draft_token_ids


class _InputBatch(object):
    """The persistent batch (host side)."""

    def __init__(self):
        self.num_tokens = 0

    def update(self, scheduler_output):
        self.num_tokens += scheduler_output.total_num_scheduled_tokens

    def record_sampled(self, token_ids):
        pass
