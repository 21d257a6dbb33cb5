"""Granite Speech fixtures: a host with the plugin registered directly, its policy, the
example checkpoint's tokenizer and the reference processor (with the torchaudio stand-in
of ``granitespeech_helpers``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import audiogate_granitespeech.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy

MODEL_DIR = Path(__file__).resolve().parents[3] / "examples" / "models" / "granite-speech-3.3-2b"


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Granite Speech family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    """The pinned Granite Speech policy."""
    return host.default_policy("granitespeech")


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The example checkpoint's stand-in tokenizer (``AutoTokenizer``, offline)."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)


@pytest.fixture(scope="session")
def processor() -> Any:
    """``AutoProcessor`` of the example checkpoint: ``GraniteSpeechProcessor``."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from granitespeech_helpers import install_torchaudio_stand_in

    install_torchaudio_stand_in()
    return transformers.AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
