"""vllm/v1/spec_decode/eagle.py: EagleProposer. prepare_next_token_ids_padded and
prepare_inputs_padded are triton kernels on the sampled tokens; propose runs the draft model
once over the target's tokens, then once per further draft token, each followed by
compute_logits and an argmax. With CUDA graphs the drafter uses PIECEWISE graphs only."""

import simgpu
from vllm.forward_context import NONE, PIECEWISE, set_forward_context


class EagleProposer(object):
    def __init__(self, vllm_config, device=None, runner=None):
        self.vllm_config = vllm_config
        self.runner = runner
        self.method = "eagle3"
        self.num_speculative_tokens = vllm_config.num_speculative_tokens
        self.use_cuda_graph = vllm_config.mode == "graph"
        self.model = None

    def load_model(self, target_model):
        from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
        self.model = Eagle3LlamaForCausalLM()

    def prepare_next_token_ids_padded(self, sampled_token_ids, requests, input_batch, discard_mask):
        simgpu.GPU.launch("eagle_next_token")
        return "next_token_ids", "valid_sampled_tokens_count"

    def prepare_inputs_padded(self, common_attn_metadata, spec_decode_metadata, valid_count):
        simgpu.GPU.launch("eagle_inputs_padded")
        return common_attn_metadata, "token_indices_to_sample", "num_rejected_tokens_gpu"

    def propose(self, target_token_ids=None, target_positions=None, target_hidden_states=None,
                next_token_ids=None, token_indices_to_sample=None, sampling_metadata=None,
                common_attn_metadata=None, num_tokens=1, **kwargs):
        gpu = simgpu.GPU
        if self.method == "eagle3":
            self.model.combine_hidden_states(target_hidden_states, num_tokens)
        # Shift the input ids by one token and put the next tokens at the last positions.
        gpu.launch("draft_input_ids", num_tokens)
        gpu.launch("index_put")
        mode = PIECEWISE if self.use_cuda_graph else NONE
        with set_forward_context(common_attn_metadata, self.vllm_config, num_tokens=num_tokens,
                                 cudagraph_runtime_mode=mode):
            self.model(input_ids=None, positions=None, hidden_states=None, num_tokens=num_tokens)
        gpu.launch("index_select")
        self.model.compute_logits(None)
        gpu.launch("argmax")
        for _ in range(self.num_speculative_tokens - 1):
            # Update positions, seq_lens and slot mappings of the one new token per request.
            gpu.launch("draft_positions")
            gpu.launch("slot_mapping")
            with set_forward_context(common_attn_metadata.decode_view(), self.vllm_config,
                                     num_tokens=1, cudagraph_runtime_mode=mode):
                self.model(input_ids=None, positions=None, hidden_states=None, num_tokens=1)
            self.model.compute_logits(None)
            gpu.launch("argmax")
        return "draft_token_ids"

    def dummy_run(self, num_tokens):
        """Startup: runs (and with CUDA graphs captures) the draft model for num_tokens."""
        mode = PIECEWISE if self.use_cuda_graph else NONE
        with set_forward_context(_DummyMetadata(num_tokens == 1), self.vllm_config,
                                 num_tokens=num_tokens, cudagraph_runtime_mode=mode):
            self.model(input_ids=None, positions=None, hidden_states=None, num_tokens=num_tokens)


class _DummyMetadata(object):
    def __init__(self, decode):
        self.decode = decode

    def decode_view(self):
        return _DummyMetadata(True)
