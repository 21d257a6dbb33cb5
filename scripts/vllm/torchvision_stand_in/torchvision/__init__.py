"""A stand-in for torchvision's import surface, for recording vLLM's Omni renders only.

vLLM's Qwen2.5-Omni and Qwen3-Omni modules import transformers' Qwen2-VL image and video
processors, which import torchvision; no torchvision build loads against the CPU torch.
An audio render never calls into vision: every function here raises if it is called.
"""

from __future__ import annotations

from torchvision import io, transforms

__all__ = ["io", "transforms"]
__version__ = "0.28.0"
