"""vllm/v1/worker/gpu/spec_decode/__init__.py: init_speculator picks the speculator of the
configured method (EAGLE3: EagleSpeculator)."""


def init_speculator(vllm_config, device):
    from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
    return EagleSpeculator(vllm_config, device)
