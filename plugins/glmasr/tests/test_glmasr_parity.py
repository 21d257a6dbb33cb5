"""Generated WAV files through the whole pipeline, against transformers' loader and
``GlmAsrProcessor`` (as ``apply_chat_template`` + the processor call run it).

Reference path: ``load_audio(backend="soundfile")`` (soundfile decode, mean downmix, soxr
HQ, ``ceil`` length: ``librosa.load(sr=16000)``), then the processor on the rendered
chat prompt. Our path: ``audiogate.pipeline.prepare_clips`` (strict decoder, this plugin's
resample and feature hooks, collate) and this plugin's prompt expansion of the segments
the core parses from the same template. Features within 1e-4; masks, windows, token
counts and ids identical.
"""

from __future__ import annotations

import numpy as np
import pytest
from glmasr_helpers import (
    TOLERANCE,
    conversation,
    make_signal,
    reference,
    transformers_load,
    wav_bytes,
)

from audiogate.chat import SentinelCodec, flatten_messages, parse_rendered, renders_parts
from audiogate.errors import FeatureError, LimitError
from audiogate.pipeline import EncodedClip, preflight, prepare_clips
from audiogate.records import ClipSlot, TextSegment
from audiogate_glmasr.geometry import MAX_SAMPLES
from audiogate_glmasr.prompt import expand_prompt

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("soundfile")

CODEC = SentinelCodec("0123456789abcdef")
PROMPT = "Please transcribe this audio into text"

#: (rate, channels, seconds, kind, subtype): 8 to 96 kHz, 1 to 6 channels, the shortest
#: admitted clip (0.06 s) to two windows, silence and clipping.
CORPUS = [
    (8_000, 1, 0.07, "am", "PCM_16"),
    (11_025, 2, 1.0, "noise", "FLOAT"),
    (16_000, 1, 0.0601, "noise", "PCM_16"),  # 962 samples: one merged row
    (16_000, 1, 1.0, "am", "PCM_16"),
    (16_000, 3, 2.5, "silence", "PCM_16"),
    (22_050, 4, 3.3, "clipped", "PCM_16"),
    (32_000, 5, 1.7, "am", "FLOAT"),
    (44_100, 2, 1.0, "am", "FLOAT"),
    (48_000, 2, 1.0, "noise", "PCM_16"),
    (48_000, 6, 4.1, "am", "FLOAT"),
    (88_200, 1, 0.7, "clipped", "FLOAT"),
    (96_000, 2, 2.2, "am", "PCM_16"),
    (16_000, 1, 30.0, "am", "PCM_16"),  # exactly one full window
    (48_000, 2, 30.0, "noise", "PCM_16"),
    (16_000, 1, 30.00625, "am", "FLOAT"),  # one window + 100 samples: a 1-frame window
    (44_100, 1, 47.3, "am", "PCM_16"),  # two windows
]


def chat_segments(tokenizer, count: int = 1):
    """The segments the core builds for one user turn (``count`` audio parts, then text)."""
    content: list[dict] = [
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    ] * count
    content.append({"type": "text", "text": PROMPT})
    flat = flatten_messages(
        [{"role": "user", "content": content}],
        codec=CODEC,
        parts=renders_parts(lambda m: tokenizer.apply_chat_template(list(m), tokenize=False)),
    )
    text = tokenizer.apply_chat_template(
        list(flat.messages), add_generation_prompt=True, tokenize=False
    )
    return parse_rendered(text, CODEC, expected={"audio": count})


def _case_id(case) -> str:
    rate, channels, seconds, kind, subtype = case
    return f"{rate}Hz-{channels}ch-{seconds}s-{kind}-{subtype}"


@pytest.mark.parametrize("case", CORPUS, ids=[_case_id(c) for c in CORPUS])
def test_wav_parity_with_the_processor(host, policy, tokenizer, processor, tmp_path, case):
    rate, channels, seconds, kind, subtype = case
    samples = round(seconds * rate)
    data = wav_bytes(
        make_signal(kind, samples=samples, rate_hz=rate, channels=channels, seed=rate + channels),
        rate_hz=rate,
        subtype=subtype,
    )
    want_waveform = transformers_load(data, tmp_path, "clip.wav")

    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    clip = batch.clips[0]
    # Same decode and resampler: bit-identical in mono and stereo; above two channels the
    # core's downmix sums in another order than numpy's mean (an ulp or two).
    if channels <= 2:
        np.testing.assert_array_equal(clip.waveform, want_waveform)
    else:
        np.testing.assert_allclose(clip.waveform, want_waveform, rtol=0, atol=2.5e-7)

    rendered = processor.apply_chat_template(
        conversation(PROMPT), add_generation_prompt=True, tokenize=False
    )
    # The reference frontend on the waveform our resampler produced.
    want = reference(processor, [clip.waveform], rendered)
    features = batch.inputs.inputs["input_features"]
    mask = batch.inputs.inputs["input_features_mask"]
    assert features.shape == want["input_features"].shape
    assert mask.dtype == want["input_features_mask"].dtype
    np.testing.assert_array_equal(mask, want["input_features_mask"])
    assert np.abs(features - want["input_features"]).max() <= TOLERANCE
    assert clip.tokens == int((want["input_ids"] == 59_260).sum())

    slot = ClipSlot(ordinal=1, tokens=clip.tokens, frames=clip.frames, sha256=clip.sha256)
    prompt = expand_prompt(policy, chat_segments(tokenizer), [slot], tokenizer, chat=True)
    assert list(prompt.input_ids) == want["input_ids"][0].tolist()
    # The processor's own placeholder in a plain prompt gives the same ids.
    plain = expand_prompt(policy, [TextSegment(rendered)], [slot], tokenizer)
    assert plain.input_ids == prompt.input_ids


@pytest.mark.slow
def test_the_longest_clip_fills_twenty_one_windows(host, policy, tokenizer, processor):
    """630 s at 16 kHz: 21 full windows, 7,875 rows, as the processor gives them."""
    waveform = make_signal("am", samples=MAX_SAMPLES, seed=7)
    data = wav_bytes(waveform, rate_hz=16_000, subtype="FLOAT")
    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    rendered = processor.apply_chat_template(
        conversation(PROMPT), add_generation_prompt=True, tokenize=False
    )
    want = reference(processor, [batch.clips[0].waveform], rendered)
    assert batch.inputs.inputs["input_features"].shape == (21, 128, 3000)
    np.testing.assert_array_equal(
        batch.inputs.inputs["input_features_mask"], want["input_features_mask"]
    )
    assert np.abs(batch.inputs.inputs["input_features"] - want["input_features"]).max() <= TOLERANCE
    assert batch.clips[0].tokens == 7_875 == int((want["input_ids"] == 59_260).sum())


def test_a_clip_past_630_seconds_is_refused_not_truncated(host, policy):
    """The processor would keep 630 s and drop the rest; the preflight refuses, typed."""
    data = wav_bytes(
        np.zeros(MAX_SAMPLES + 160, dtype=np.float32), rate_hz=16_000, subtype="PCM_16"
    )
    with pytest.raises(LimitError) as caught:
        preflight(host, policy, [EncodedClip(data=data, ordinal=1)])
    assert caught.value.clip_index == 0


def test_a_clip_without_a_merged_row_is_refused(host, policy):
    """0.02 s (320 samples, 2 frames) has no merged row: a typed refusal, not an empty run."""
    data = wav_bytes(make_signal("noise", samples=320), rate_hz=16_000, subtype="PCM_16")
    with pytest.raises(FeatureError) as caught:
        preflight(host, policy, [EncodedClip(data=data, ordinal=1)])
    assert caught.value.clip_index == 0


def test_two_clips_fill_their_windows_in_order(host, policy, tokenizer, processor, tmp_path):
    """Two clips: the rows are the two clips' windows in order, each as the processor
    gives that clip alone (the processor takes one audio per prompt)."""
    datas = [
        wav_bytes(
            make_signal("am", samples=44_100 * 31, rate_hz=44_100, seed=1),
            rate_hz=44_100,
            subtype="PCM_16",
        ),
        wav_bytes(
            make_signal("noise", samples=16_000 * 3, channels=2, seed=2),
            rate_hz=16_000,
            subtype="FLOAT",
        ),
    ]
    batch = prepare_clips(
        host, policy, [EncodedClip(data=d, ordinal=i + 1) for i, d in enumerate(datas)]
    )
    rendered = processor.apply_chat_template(
        conversation(PROMPT), add_generation_prompt=True, tokenize=False
    )
    rows = 0
    for clip in batch.clips:
        want = reference(processor, [clip.waveform], rendered)
        count = want["input_features"].shape[0]
        got = batch.inputs.inputs["input_features"][rows : rows + count]
        assert np.abs(got - want["input_features"]).max() <= TOLERANCE
        np.testing.assert_array_equal(
            batch.inputs.inputs["input_features_mask"][rows : rows + count],
            want["input_features_mask"],
        )
        assert clip.tokens == int((want["input_ids"] == 59_260).sum())
        rows += count
    assert rows == batch.inputs.inputs["input_features"].shape[0] == 3


AUDIO_PART = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}


@pytest.mark.parametrize(("rate", "channels", "seconds"), [(16_000, 1, 1.0), (48_000, 2, 31.5)])
def test_the_gate_on_the_example_directory_gives_the_processors_inputs(
    host, models_dir, tmp_path, rate, channels, seconds
):
    """``AudioGate.prepare`` on the bundled directory against ``AutoProcessor`` of the same
    directory (its tokenizer, template and processor files) on the loader's waveform."""
    from transformers import AutoProcessor

    from audiogate.acquire import AcquisitionPolicy, acquire_bytes
    from audiogate.api import AudioGate

    directory = models_dir / "glm-asr-nano-2512"
    gate = AudioGate.from_model_dir(directory, host=host)
    data = wav_bytes(
        make_signal("am", samples=round(seconds * rate), rate_hz=rate, channels=channels, seed=3),
        rate_hz=rate,
        subtype="PCM_16",
    )
    clips = acquire_bytes([data], policy=AcquisitionPolicy().narrowed(gate.policy))
    prepared = gate.prepare(
        [{"role": "user", "content": [AUDIO_PART, {"type": "text", "text": PROMPT}]}], clips=clips
    )

    processor = AutoProcessor.from_pretrained(str(directory))
    waveform = transformers_load(data, tmp_path, "gate.wav")
    want = processor.apply_transcription_request(waveform, prompt=PROMPT)
    assert list(prepared.input_ids) == want["input_ids"][0].tolist()
    features = prepared.model_inputs["input_features"]
    assert features.shape == tuple(want["input_features"].shape)
    assert np.abs(features - want["input_features"].numpy()).max() <= TOLERANCE
    np.testing.assert_array_equal(
        prepared.model_inputs["input_features_mask"], want["input_features_mask"].numpy()
    )
