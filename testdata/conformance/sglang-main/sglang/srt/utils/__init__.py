"""Mirrors sglang/srt/utils (the package re-exports utils/common.py)."""
from sglang.srt.utils.common import DynamicGradMode  # noqa: F401
