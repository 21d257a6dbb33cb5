"""Which path a user turn takes (``AudioGate.prepare_user_turn``): the chat path unless the
text holds what the family's chat path refuses (``AudioGate.places_audio``), on every
shipped family's bundled checkpoint.

The ids each path gives are the contract suite's (``test_a_user_turn_places_the_clips_as_
the_chat_request_does``) and ``tests/chat/test_cli_prepare.py``'s; here: the choice is made
before preparing, so a turn is prepared (and counted) once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shipped import shipped_families

from audiogate.api import AudioGate
from audiogate.testing.audio import encoded_clip

pytest.importorskip("transformers")

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
#: Per family: what a user writes to place one clip itself (the contract suites'
#: ``user_placeholder``; Voxtral has none, and its audio token is refused either way).
PLACEHOLDERS = {
    "phi4mm": "<|audio_1|>",
    "gemma3n": "<audio_soft_token>",
    "qwen2audio": "[audio:{sha256}]",
    "voxtral": "[AUDIO]",
    "granitespeech": "<|audio|>",
    "audioflamingo3": "<sound>",
    "glmasr": "<|pad|>",
    "qwen25omni": "<|audio_bos|><|AUDIO|><|audio_eos|>",
    "qwen3omni": "<|audio_start|><|audio_pad|><|audio_end|>",
}
FAMILIES = {family.name: family.examples[0] for family in shipped_families()}


def test_every_shipped_family_has_a_placeholder_here() -> None:
    assert set(PLACEHOLDERS) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_placeholders_choose_the_plain_path_and_plain_text_the_chat_path(family, monkeypatch):
    gate = AudioGate.from_model_dir(MODELS / FAMILIES[family])
    audio = encoded_clip(seconds=1.0)
    placed = "Describe " + PLACEHOLDERS[family].format(sha256=audio.sha256) + " briefly."
    assert gate.places_audio(placed)
    assert not gate.places_audio("Describe the clip briefly.")
    assert not gate.places_audio("")

    calls: list[str] = []
    prepare = gate.prepare

    def counted(*args, **kwargs):
        calls.append("prompt" if kwargs.get("prompt") is not None else "messages")
        return prepare(*args, **kwargs)

    monkeypatch.setattr(gate, "prepare", counted)
    gate.prepare_user_turn("Describe the clip briefly.", [audio])
    assert calls == ["messages"]
    calls.clear()
    if family == "voxtral":  # its audio token is refused in any prompt
        return
    gate.prepare_user_turn(placed, [audio])
    assert calls == ["prompt"]
