"""Voxtral fixtures: a host with the plugin registered directly, its policy, the example
directory's stand-in tokenizer and ``VoxtralProcessor`` (session-scoped: loading them is the
slow part)."""

from __future__ import annotations

from typing import Any

import pytest
from voxtral_tokenizer import MODEL_DIR

import audiogate_voxtral.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Voxtral family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    """The pinned Voxtral policy."""
    return host.default_policy("voxtral")


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The example directory's ``tokenizer.json``, loaded as audiogate loads it."""
    pytest.importorskip("transformers")
    from audiogate.api import load_tokenizer

    return load_tokenizer(MODEL_DIR)


@pytest.fixture(scope="session")
def processor() -> Any:
    """``AutoProcessor.from_pretrained`` of the example directory (offline): a
    ``VoxtralProcessor`` with ``WhisperFeatureExtractor`` and, where mistral-common is
    installed, ``MistralCommonBackend`` on ``tekken.json`` (else ``TokenizersBackend``)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
