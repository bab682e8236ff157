"""vllm/v1/worker/gpu/spec_decode/speculator.py: DraftModelSpeculator, the base of speculators
with a draft model; sample_draft turns a draft hidden state into a token (compute_logits, then
Gumbel sampling, argmax when greedy)."""

import simgpu


class DraftModelSpeculator(object):
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.device = device
        self.num_speculative_steps = vllm_config.num_speculative_tokens
        self.method = "eagle3"
        self.draft_logits = None
        self.model = None

    def load_model(self, target_model):
        from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
        self.model = Eagle3LlamaForCausalLM()

    def sample_draft(self, sample_hidden_states, num_reqs):
        self.model.compute_logits(sample_hidden_states, num_reqs)
        simgpu.GPU.launch("argmax", num_reqs)
        return "draft_tokens"
