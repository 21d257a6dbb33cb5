"""Qwen2-Audio fixtures: a host with the plugin registered directly, its policy, and the
stand-in tokenizer / reference processor (session-scoped: building them is the slow part)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from qwen2audio_helpers import SPECIAL_TOKENS

import audiogate_qwen2audio.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy
from audiogate_qwen2audio.prompt import CHAT_TEMPLATE


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Qwen2-Audio family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def qwen_host(host: FamilyHost) -> FamilyHost:
    """The same host, under the name the Qwen2-Audio tests use."""
    return host


@pytest.fixture
def policy(qwen_host: FamilyHost) -> AudioPolicy:
    """The pinned Qwen2-Audio policy."""
    return qwen_host.default_policy("qwen2audio")


@pytest.fixture
def strict_policy(policy: AudioPolicy) -> AudioPolicy:
    """The strict profile a deployment may set: the serving guide's three rates (and the
    range they span) and one or two channels (docs/provenance.md)."""
    return attrs.evolve(
        policy,
        min_source_rate_hz=16_000,
        max_source_rate_hz=48_000,
        max_source_channels=2,
        options={**policy.options, "strict_source_rates": True},
    )


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """Byte-level stand-in with Qwen2-Audio's special tokens at their real ids."""
    pytest.importorskip("transformers")
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    return build_stand_in_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


@pytest.fixture(scope="session")
def processor(tokenizer: Any) -> Any:
    """``Qwen2AudioProcessor`` built offline from its components."""
    from qwen2audio_helpers import build_processor

    return build_processor(tokenizer)
