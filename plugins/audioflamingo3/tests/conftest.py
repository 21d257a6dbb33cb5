"""Audio Flamingo 3 fixtures: a host with the plugin registered directly, its policy, and the
stand-in tokenizer / reference processor (session-scoped: building them is the slow part)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import audiogate_audioflamingo3.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Audio Flamingo 3 family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    """The pinned Audio Flamingo 3 policy."""
    return host.default_policy("audioflamingo3")


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """Byte-level stand-in with the checkpoint's special tokens at their real ids."""
    pytest.importorskip("transformers")
    from audioflamingo3_tokenizer import build

    return build()


@pytest.fixture(scope="session")
def processor(tokenizer: Any) -> Any:
    """``AudioFlamingo3Processor`` built offline from its components, as the checkpoint's."""
    from audioflamingo3_helpers import build_processor

    return build_processor(tokenizer)


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """``examples/models`` of the repository."""
    return Path(__file__).resolve().parents[3] / "examples" / "models"
