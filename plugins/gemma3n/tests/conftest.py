"""Gemma 3n fixtures: pinned and left-padding policies, the stand-in tokenizer."""

from __future__ import annotations

from typing import Any

import pytest
from gemma3n_helpers import CHAT_TEMPLATE, SPECIAL_TOKENS

import audiogate_gemma3n.plugin as family_plugin
from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy, CheckpointConfigs


@pytest.fixture
def host() -> FamilyHost:
    """A fresh host with only the Gemma 3n family (and the core defaults)."""
    return create_host(plugins=[family_plugin], load_entry_points=False)


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    """The pinned policy (a checkpoint that declares nothing)."""
    return host.parse_policy("gemma3n", CheckpointConfigs(model={"model_type": "gemma3n"}))


@pytest.fixture
def left_policy(host: FamilyHost) -> AudioPolicy:
    """A checkpoint whose preprocessor pads batches on the left."""
    return host.parse_policy(
        "gemma3n",
        CheckpointConfigs(
            model={"model_type": "gemma3n"},
            processor={"padding_side": "left"},
            processor_file="preprocessor_config.json",
        ),
    )


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """Byte-level stand-in with Gemma 3n's special tokens at their real ids."""
    pytest.importorskip("transformers")
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    return build_stand_in_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
    )
