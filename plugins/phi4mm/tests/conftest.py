"""Phi-4 MM fixtures: policies of both variants and stand-in tokenizers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from phi4mm_helpers import (
    NATIVE_CHAT_TEMPLATE,
    NATIVE_SPECIAL_TOKENS,
    REMOTE_CHAT_TEMPLATE,
    REMOTE_SPECIAL_TOKENS,
)

import audiogate_phi4mm.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy, CheckpointConfigs


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Phi-4 MM family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def remote(host: FamilyHost) -> AudioPolicy:
    """The pinned remote-code policy (no checkpoint declarations)."""
    return host.parse_policy("phi4mm", CheckpointConfigs(model={"model_type": "phi4mm"}))


@pytest.fixture
def native(host: FamilyHost) -> AudioPolicy:
    """The transformers-native policy (``model_type`` ``phi4_multimodal``)."""
    return host.parse_policy("phi4mm", CheckpointConfigs(model={"model_type": "phi4_multimodal"}))


TokenizerFactory = Callable[[str], object]


@pytest.fixture(scope="session")
def stand_in_tokenizer() -> TokenizerFactory:
    """``stand_in_tokenizer("remote_code" | "native")``: byte-level, real special ids."""
    pytest.importorskip("transformers")
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    cache: dict[str, object] = {}

    def make(variant: str) -> object:
        if variant not in cache:
            native = variant == "native"
            cache[variant] = build_stand_in_tokenizer(
                NATIVE_SPECIAL_TOKENS if native else REMOTE_SPECIAL_TOKENS,
                chat_template=NATIVE_CHAT_TEMPLATE if native else REMOTE_CHAT_TEMPLATE,
                bos_token="<|endoftext|>",
                eos_token="<|endoftext|>",
                pad_token="<|endoftext|>",
                unk_token="<|endoftext|>",
            )
        return cache[variant]

    return make
