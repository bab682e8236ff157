"""vllm/v1/worker/gpu/spec_decode/eagle/speculator.py: EagleSpeculator, the autoregressive
speculator with an EAGLE/EAGLE3 head; propose is AutoRegressiveSpeculator's."""

from vllm.v1.worker.gpu.spec_decode.autoregressive.speculator import AutoRegressiveSpeculator


class EagleSpeculator(AutoRegressiveSpeculator):
    pass
