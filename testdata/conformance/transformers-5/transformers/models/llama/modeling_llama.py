"""transformers/models/llama/modeling_llama.py (5.x): LlamaForCausalLM -> LlamaModel ->
LlamaDecoderLayer -> LlamaAttention / LlamaMLP / LlamaRMSNorm, each called as an nn.Module
(Module._wrapped_call_impl -> Module._call_impl -> forward), eager kernels throughout."""

import simtorch
from simtorch import nn
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerationMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_rope_utils import dynamic_rope_update
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults


class LlamaConfig(object):
    def __init__(self, num_hidden_layers, role):
        self.num_hidden_layers = num_hidden_layers
        self.role = role  # "target" or "assistant": which toy weights (simtorch.Oracle)
        self.use_cache = True
        self.is_encoder_decoder = False


class BaseModelOutputWithPast(object):
    def __init__(self, last_hidden_state, past_key_values):
        self.last_hidden_state = last_hidden_state
        self.past_key_values = past_key_values


class CausalLMOutputWithPast(object):
    def __init__(self, logits, past_key_values):
        self.logits = logits
        self.past_key_values = past_key_values


class LlamaRMSNorm(nn.Module):
    def forward(self, hidden_states):
        # pow, mean, rsqrt, mul, weight mul: fused here into two launches
        simtorch.DEV.k("norm", 2)
        return hidden_states


class LlamaRotaryEmbedding(nn.Module):
    @simtorch.no_grad()
    @dynamic_rope_update
    def forward(self, x, position_ids):
        # inv_freq @ position_ids, cat, cos, sin
        simtorch.DEV.k("rope", 3)
        return position_ids


def apply_rotary_pos_emb(q, k, cos, sin):
    # q * cos + rotate_half(q) * sin, same for k
    simtorch.DEV.k("rope", 2)
    return q, k


class LlamaAttention(nn.Module):
    def __init__(self, layer_idx):
        nn.Module.__init__(self)
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear("qkv")
        self.k_proj = nn.Linear("qkv")
        self.v_proj = nn.Linear("qkv")
        self.o_proj = nn.Linear("o_proj")

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None, **kwargs):
        q = self.q_proj(hidden_states)
        k = self.k_proj(hidden_states)
        v = self.v_proj(hidden_states)
        q, k = apply_rotary_pos_emb(q, k, position_embeddings, position_embeddings)
        if past_key_values is not None:
            past_key_values.update(hidden_states, hidden_states, self.layer_idx)
        attn_output = sdpa_attention_forward(self, q, k, v, attention_mask)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self):
        nn.Module.__init__(self)
        self.gate_proj = nn.Linear("gate_up")
        self.up_proj = nn.Linear("gate_up")
        self.down_proj = nn.Linear("down")

    def forward(self, x):
        gate = self.gate_proj(x)
        up = self.up_proj(x)
        simtorch.DEV.k("act")  # act_fn(gate) * up
        return self.down_proj(gate + up - up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, layer_idx):
        nn.Module.__init__(self)
        self.self_attn = LlamaAttention(layer_idx)
        self.mlp = LlamaMLP()
        self.input_layernorm = LlamaRMSNorm()
        self.post_attention_layernorm = LlamaRMSNorm()

    def forward(self, hidden_states, attention_mask=None, position_embeddings=None, past_key_values=None, **kwargs):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask, past_key_values)
        simtorch.DEV.k("binary")  # residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        simtorch.DEV.k("binary")  # residual + hidden_states
        return hidden_states + residual - residual


class LlamaModel(nn.Module):
    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = config
        self.embed_tokens = nn.Embedding()
        self.layers = nn.ModuleList([LlamaDecoderLayer(i) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm()
        self.rotary_emb = LlamaRotaryEmbedding()

    @merge_with_config_defaults
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=None, **kwargs):
        hidden_states = self.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask=attention_mask,
                                          position_embeddings=position_embeddings,
                                          past_key_values=past_key_values)
        hidden_states = self.norm(hidden_states)
        return BaseModelOutputWithPast(hidden_states, past_key_values)


class LlamaForCausalLM(GenerationMixin, nn.Module):
    def __init__(self, config, generation_config):
        nn.Module.__init__(self)
        self.config = config
        self.generation_config = generation_config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear("lm_head")
        self.forwards = 0  # toy weights: the target's n-th forward may predict EOS

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=None, logits_to_keep=0, **kwargs):
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=past_key_values, use_cache=use_cache)
        self.lm_head(outputs.last_hidden_state)
        self.forwards += 1
        positions = position_ids.host
        if logits_to_keep:
            positions = positions[-logits_to_keep:]
        predicted = simtorch.ORACLE.next_tokens(self.config.role, positions, self.forwards)
        logits = simtorch.Tensor(predicted, (1, len(predicted), simtorch.VOCAB))
        return CausalLMOutputWithPast(logits, outputs.past_key_values)
