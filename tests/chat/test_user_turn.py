"""``audiogate prepare --model DIR --prompt`` and batch rows prepare one user turn: for
every shipped family, the same ids and features as the chat request a client would send
(the clip, then the text), so no family's clip lands before the template's first token."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from shipped import shipped_families

from audiogate.acquire import acquire_bytes
from audiogate.api import AudioGate
from audiogate.testing.audio import encoded_clip

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {f.name: f.examples[0] for f in shipped_families() if f.examples}


@pytest.mark.parametrize("family", sorted(EXAMPLES))
def test_a_user_turn_is_the_chat_request_with_the_clip_before_the_text(family: str) -> None:
    gate = AudioGate.from_model_dir(REPO / "examples" / "models" / EXAMPLES[family])
    data = encoded_clip(seconds=1.0, seed=3).data
    clips = acquire_bytes([data], policy=gate.acquisition)
    got = gate.prepare_user_turn("Transcribe the audio.", clips)
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode()}}
    text = {"type": "text", "text": "Transcribe the audio."}
    want = gate.prepare([{"role": "user", "content": [audio, text]}])
    assert list(got.input_ids) == list(want.input_ids)
    assert got.text == want.text
    assert [c.tokens for c in got.batch.clips] == [c.tokens for c in want.batch.clips]
    if got.text is not None:  # the template's own opening comes first, the audio after it
        rendered = gate.chat_prompt("Transcribe the audio.")
        opening = rendered[: rendered.index("Transcribe")].rstrip()
        assert got.text.startswith(opening[: max(1, len(opening) // 2)])
