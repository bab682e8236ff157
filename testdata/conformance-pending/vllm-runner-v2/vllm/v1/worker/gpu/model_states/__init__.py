"""vllm/v1/worker/gpu/model_states: per-model-type state (dense decoder: DefaultModelState)."""


def init_model_state(vllm_config):
    from vllm.v1.worker.gpu.model_states.default import DefaultModelState
    return DefaultModelState()
