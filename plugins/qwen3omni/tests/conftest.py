"""Qwen3-Omni fixtures: a host with only this plugin, its policy, the example model
directory's tokenizer and the reference processor (session-scoped: building them is slow)."""

from __future__ import annotations

from typing import Any

import pytest

import audiogate_qwen3omni.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Qwen3-Omni family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    """The pinned Qwen3-Omni policy."""
    return host.default_policy("qwen3omni")


@pytest.fixture(scope="session")
def processor() -> Any:
    """``Qwen3OmniMoeProcessor`` of ``examples/models/qwen3-omni-30b-a3b-instruct``."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from qwen3omni_helpers import build_processor

    return build_processor()


@pytest.fixture(scope="session")
def tokenizer(processor: Any) -> Any:
    """The example directory's stand-in tokenizer (real special tokens and template)."""
    return processor.tokenizer
