"""Mirrors sglang/srt/model_executor/runner (the 2026 graph-runner package; re-exports)."""
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner  # noqa: F401
