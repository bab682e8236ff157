"""vllm/v1/worker/gpu/model_states/default.py: DefaultModelState builds the attention metadata
(host-side objects over the device buffers prepare_inputs/prepare_attn filled) and adds
nothing to the model inputs of a dense decoder."""


class DefaultModelState(object):
    def preprocess_state(self, input_batch, block_tables, *args):
        pass

    def prepare_attn(self, input_batch, cg_mode, block_tables, slot_mappings, *args, **kwargs):
        return _AttnMetadata(not input_batch.has_prefill)

    def prepare_inputs(self, input_batch, req_states=None):
        return {}

    def postprocess_state(self, idx_mapping, num_sampled, *args):
        pass


class _AttnMetadata(object):
    def __init__(self, decode):
        self.decode = decode
