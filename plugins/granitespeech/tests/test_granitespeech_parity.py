"""WAV files from 8 to 96 kHz, one to six channels, 0.02 s to 80 s, through the whole
pipeline, against transformers' loader and ``GraniteSpeechProcessor`` as the model card
calls it; and the refusals.

Reference path: ``transformers.audio_utils.load_audio(backend="soundfile")`` (soundfile
decode, mean downmix, soxr HQ, ``ceil`` length: ``librosa.load(sr=16000)``), then
``AutoProcessor`` of ``examples/models/granite-speech-3.3-2b`` on the model card's chat.
Our path: ``AudioGate`` on the same directory, or ``prepare_clips`` and the plugin's
expansion.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from granitespeech_helpers import SYSTEM_PROMPT, exact_reference, make_signal
from test_granitespeech_features import assert_parity

import audiogate_granitespeech.plugin as family_plugin
from audiogate.api import AudioGate
from audiogate.errors import FeatureError, LimitError
from audiogate.host import create_host
from audiogate.pipeline import EncodedClip, prepare_clips
from audiogate.records import ClipSlot, TextSegment
from conftest import MODEL_DIR

pytest.importorskip("torch")
pytest.importorskip("transformers")
soundfile = pytest.importorskip("soundfile")

QUESTION = "can you transcribe the speech into a written format?"
AUDIO_ID = 49_159


def wav(data: np.ndarray, rate: int, subtype: str) -> bytes:
    import io

    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def transformers_load(data: bytes, tmp_path: Path) -> np.ndarray:
    from transformers.audio_utils import load_audio

    path = tmp_path / "clip.wav"
    path.write_bytes(data)
    return np.asarray(load_audio(str(path), sampling_rate=16_000, backend="soundfile"))


def rendered_chat(tokenizer, user: str) -> str:
    return str(
        tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            tokenize=False,
            add_generation_prompt=True,
        )
    )


CASES = [
    (8_000, "PCM_16", 1, 0.02),
    (11_025, "FLOAT", 2, 0.02),
    (16_000, "PCM_16", 1, 0.0161),
    (16_000, "FLOAT", 1, 1.0),
    (16_000, "PCM_16", 6, 1.0),
    (22_050, "PCM_16", 3, 1.0),
    (44_100, "FLOAT", 2, 1.0),
    (48_000, "PCM_16", 2, 1.0),
    (48_000, "FLOAT", 5, 2.31),
    (96_000, "PCM_16", 4, 1.0),
    (96_000, "FLOAT", 1, 0.02),
    (16_000, "PCM_16", 1, 30.0),
    (48_000, "PCM_16", 2, 30.0),
]


@pytest.mark.parametrize(("rate", "subtype", "channels", "seconds"), CASES)
def test_wav_parity_with_the_processor(
    host, policy, tokenizer, processor, tmp_path, rate, subtype, channels, seconds
):
    samples = round(seconds * rate)
    kind = "clipped" if channels == 3 else "speechlike"
    data = wav(
        make_signal(kind, samples=samples, rate_hz=rate, channels=channels, seed=rate + channels),
        rate,
        subtype,
    )
    reference_waveform = transformers_load(data, tmp_path)
    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    clip = batch.clips[0]
    # Same decode, downmix and resampler: the normalized waveforms are bit-identical, but
    # for float sources of more than two channels, whose mean the core's decoder rounds
    # differently from numpy's (an ulp at most).
    if subtype == "FLOAT" and channels > 2:
        np.testing.assert_allclose(clip.waveform, reference_waveform, rtol=0, atol=2e-7)
    else:
        np.testing.assert_array_equal(clip.waveform, reference_waveform)

    rendered = rendered_chat(tokenizer, f"<|audio|>{QUESTION}")
    reference = processor(rendered, reference_waveform, return_tensors="pt")
    features = batch.inputs.inputs["input_features"]
    mask = batch.inputs.inputs["input_features_mask"]
    np.testing.assert_array_equal(mask, reference["input_features_mask"].numpy())
    assert_parity(
        features[0], reference["input_features"][0].numpy(), exact_reference(clip.waveform)
    )
    expanded = host.expand_prompt(
        policy,
        [TextSegment(rendered)],
        [ClipSlot(ordinal=1, tokens=clip.tokens, frames=clip.frames, sha256=clip.sha256)],
        tokenizer,
    )
    assert list(expanded.input_ids) == reference["input_ids"][0].tolist()
    assert clip.tokens == int((reference["input_ids"] == AUDIO_ID).sum())


@pytest.mark.slow
def test_a_long_clip_is_taken_whole(host, policy, processor, tmp_path):
    data = wav(make_signal("speechlike", samples=80 * 22_050 + 7, rate_hz=22_050), 22_050, "FLOAT")
    reference_waveform = transformers_load(data, tmp_path)
    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    reference = processor("<|audio|>", reference_waveform, return_tensors="pt")
    assert_parity(
        batch.inputs.inputs["input_features"][0],
        reference["input_features"][0].numpy(),
        exact_reference(reference_waveform),
    )
    assert batch.clips[0].tokens == int((reference["input_ids"] == AUDIO_ID).sum()) == 801


def gate() -> AudioGate:
    # Only this family: the test must not depend on which other plugins are installed.
    host = create_host(plugins=[family_plugin], load_entry_points=False)
    return AudioGate.from_model_dir(MODEL_DIR, host=host)


def test_chat_messages_through_the_gate_match_the_processor(tokenizer, processor, tmp_path):
    rates = (44_100, 16_000, 8_000)
    datas = [
        wav(make_signal("speechlike", samples=int(s * r), rate_hz=r, seed=i), r, "PCM_16")
        for i, (r, s) in enumerate(zip(rates, (1.3, 2.0, 0.4), strict=True))
    ]
    parts = [
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(d).decode(), "format": "wav"},
        }
        for d in datas
    ]
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]},
    ]
    prepared = gate().prepare(messages)
    waves = []
    for index, data in enumerate(datas):
        (tmp_path / str(index)).mkdir()
        waves.append(transformers_load(data, tmp_path / str(index)))
    rendered = rendered_chat(tokenizer, "<|audio|>" * len(datas) + QUESTION)
    reference = processor(rendered, waves, return_tensors="pt")
    assert list(prepared.input_ids) == reference["input_ids"][0].tolist()
    np.testing.assert_array_equal(
        prepared.model_inputs["input_features_mask"], reference["input_features_mask"].numpy()
    )
    total = max(w.size for w in waves)
    for row, wave in enumerate(waves):
        padded = np.zeros(total, dtype=np.float32)
        padded[: wave.size] = wave
        assert_parity(
            prepared.model_inputs["input_features"][row],
            reference["input_features"][row].numpy(),
            exact_reference(padded),
        )


def test_a_plain_prompt_without_placeholder_gets_the_audio_at_the_user_turn(tokenizer):
    data = wav(make_signal("noise", samples=16_000), 16_000, "PCM_16")
    plain = gate().prepare(
        prompt=rendered_chat(tokenizer, QUESTION), clips=[EncodedClip(data=data, ordinal=1)]
    )
    written = gate().prepare(
        prompt=rendered_chat(tokenizer, f"<|audio|>{QUESTION}"),
        clips=[EncodedClip(data=data, ordinal=1)],
    )
    assert plain.input_ids == written.input_ids
    assert plain.audio_spans == written.audio_spans


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 44_100, 48_000, 96_000, 192_000])
def test_every_rate_load_audio_converts_is_taken(host, policy, rate):
    data = wav(make_signal("noise", samples=rate // 3, rate_hz=rate), rate, "PCM_16")
    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    assert batch.clips[0].normalized_samples == -(-(rate // 3) * 16_000 // rate)


def test_past_the_longest_clip_is_refused_not_truncated(host, policy):
    data = wav(np.zeros(300 * 8_000 + 1, dtype=np.float32), 8_000, "PCM_16")
    with pytest.raises(LimitError):
        prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])


def test_the_longest_clip_is_taken(host, policy):
    data = wav(make_signal("noise", samples=300 * 8_000, rate_hz=8_000), 8_000, "PCM_16")
    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    assert batch.clips[0].frames == 15_000
    assert batch.clips[0].tokens == 3_000


def test_a_clip_the_reference_cannot_pad_is_refused(host, policy):
    # 0.016 s at 16 kHz is 256 samples: torch's reflect padding of 256 needs more.
    data = wav(make_signal("noise", samples=256), 16_000, "PCM_16")
    with pytest.raises(FeatureError, match="too short"):
        prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
