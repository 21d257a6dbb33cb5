"""GLM-ASR fixtures: a host with the plugin registered directly, its policy, and the
stand-in tokenizer / reference processor (session-scoped: building them is the slow part)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import audiogate_glmasr.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the GLM-ASR family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    """The pinned GLM-ASR policy."""
    return host.default_policy("glmasr")


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """Byte-level stand-in with the checkpoint's special tokens at their real ids."""
    pytest.importorskip("transformers")
    from glmasr_tokenizer import build

    return build()


@pytest.fixture(scope="session")
def processor(tokenizer: Any) -> Any:
    """``GlmAsrProcessor`` built offline from its components, as the checkpoint's."""
    from glmasr_helpers import build_processor

    return build_processor(tokenizer)


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """``examples/models`` of the repository."""
    return Path(__file__).resolve().parents[3] / "examples" / "models"
