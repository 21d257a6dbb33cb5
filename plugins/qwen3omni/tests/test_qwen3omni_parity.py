"""WAV files from 8 to 96 kHz, one to six channels, 0.02 s to past 300 s, silence and
clipping, through the whole pipeline, against the reference loader and
``Qwen3OmniMoeProcessor`` called as its docs show (rendered chat text and 16 kHz arrays).

Reference path: transformers' ``load_audio(backend="soundfile")`` (soundfile decode, mean
downmix, soxr HQ, ``ceil`` length: ``librosa.load(sr=16000)``), then the processor.
Our path: ``audiogate.pipeline.prepare_clips`` (strict decoder, this plugin's resample
and feature hooks, collate) and this plugin's prompt expansion.
"""

from __future__ import annotations

import numpy as np
import pytest
from qwen3omni_helpers import (
    AUDIO_ID,
    TOLERANCE,
    make_signal,
    render,
    run_processor,
    transformers_load,
    wav_bytes,
)

from audiogate.errors import FeatureError, LimitError
from audiogate.pipeline import EncodedClip, prepare_clips
from audiogate.records import ClipSlot, TextSegment
from audiogate_qwen3omni.prompt import expand_prompt

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("soundfile")

# (rate, channels, subtype, kind, seconds): every rate paired with a channel count, a
# sample format and a signal, at a short, a one-second and a middling length.
CORPUS = [
    (rate, channels, subtype, kind, seconds)
    for (rate, channels, subtype, kind) in (
        (8_000, 1, "PCM_16", "am"),
        (11_025, 2, "FLOAT", "noise"),
        (16_000, 1, "FLOAT", "clipped"),
        (22_050, 3, "PCM_16", "pink"),
        (32_000, 4, "FLOAT", "am"),
        (44_100, 2, "PCM_16", "clipped"),
        (48_000, 6, "FLOAT", "noise"),
        (96_000, 5, "PCM_16", "am"),
    )
    for seconds in (0.02, 1.0, 7.3)
] + [
    (16_000, 1, "PCM_16", "silence", 2.0),
    (48_000, 2, "FLOAT", "silence", 0.5),
    (16_000, 1, "FLOAT", "am", 300.0),
    (48_000, 2, "PCM_16", "noise", 300.0),
]


def _prepare(host, policy, data):
    return prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])


@pytest.mark.parametrize(("rate", "channels", "subtype", "kind", "seconds"), CORPUS)
@pytest.mark.slow
def test_corpus_parity_with_the_processor(
    host, policy, processor, tmp_path, rate, channels, subtype, kind, seconds
):
    samples = round(seconds * rate) + (37 if seconds == 1.0 else 0)
    signal = make_signal(kind, samples=samples, rate_hz=rate, channels=channels, seed=rate)
    data = wav_bytes(signal, rate_hz=rate, subtype=subtype)
    reference_waveform = transformers_load(data, tmp_path, "clip.wav")

    batch = _prepare(host, policy, data)
    clip = batch.clips[0]
    # Same decode, downmix and resampler: the normalized waveforms agree to float32
    # rounding (a mean over several channels may round differently).
    assert clip.waveform.shape == reference_waveform.shape
    np.testing.assert_allclose(clip.waveform, reference_waveform, rtol=0, atol=2e-7)

    text = render(processor, 1)
    reference = run_processor(processor, text, [reference_waveform])
    features = batch.inputs.inputs["input_features"]
    mask = batch.inputs.inputs["feature_attention_mask"]
    assert features.shape == reference["input_features"].shape == (1, 128, clip.frames)
    assert clip.frames == clip.waveform.shape[0] // 160
    assert mask.dtype == reference["feature_attention_mask"].dtype
    np.testing.assert_array_equal(mask, reference["feature_attention_mask"])
    assert np.abs(features - reference["input_features"]).max() <= TOLERANCE
    assert clip.tokens == int((reference["input_ids"] == AUDIO_ID).sum())

    expanded = expand_prompt(
        policy,
        [TextSegment(text)],
        [ClipSlot(ordinal=1, tokens=clip.tokens, frames=clip.frames, sha256=clip.sha256)],
        processor.tokenizer,
    )
    assert list(expanded.input_ids) == reference["input_ids"][0].tolist()


@pytest.mark.slow
def test_several_clips_are_each_the_processors_clip_alone(host, policy, processor, tmp_path):
    datas = [
        wav_bytes(
            make_signal("noise", samples=44_100 * 2, rate_hz=44_100, seed=1),
            rate_hz=44_100,
            subtype="PCM_16",
        ),
        wav_bytes(
            make_signal("am", samples=16_000 * 3 + 5, channels=2, seed=2),
            rate_hz=16_000,
            subtype="FLOAT",
        ),
        wav_bytes(
            make_signal("clipped", samples=8_000, rate_hz=8_000, seed=3),
            rate_hz=8_000,
            subtype="PCM_16",
        ),
    ]
    batch = prepare_clips(
        host, policy, [EncodedClip(data=d, ordinal=i + 1) for i, d in enumerate(datas)]
    )
    waveforms = [transformers_load(d, tmp_path, f"c{i}.wav") for i, d in enumerate(datas)]
    features = batch.inputs.inputs["input_features"]
    mask = batch.inputs.inputs["feature_attention_mask"]
    assert features.shape == (3, 128, 300)
    for index, waveform in enumerate(waveforms):
        alone = run_processor(processor, render(processor, 1), [waveform])
        frames = alone["input_features"].shape[-1]
        assert mask[index].tolist() == [1] * frames + [0] * (300 - frames)
        assert np.abs(features[index, :, :frames] - alone["input_features"][0]).max() <= TOLERANCE
    assert batch.inputs.tokens == (26, 39, 13)
    text = render(processor, 3, "Compare them.")
    slots = [
        ClipSlot(ordinal=i + 1, tokens=c.tokens, frames=c.frames, sha256=c.sha256)
        for i, c in enumerate(batch.clips)
    ]
    expanded = expand_prompt(policy, [TextSegment(text)], slots, processor.tokenizer)
    reference = run_processor(processor, text, waveforms)
    # In one call the processor pads the clips to the longest (the 3 s + 5 sample one)
    # before framing; the shorter ones are multiples of 160 samples here, so the frame
    # counts and ids agree (test_the_batch_frame_difference_can_change_a_token_count pins
    # the case where they do not).
    assert reference["feature_attention_mask"].sum(-1).tolist() == [200, 300, 100]
    assert list(expanded.input_ids) == reference["input_ids"][0].tolist()


def test_the_batch_frame_difference_can_change_a_token_count(processor):
    # 16,001 samples: 100 frames (13 rows) alone, 101 frames (14 rows) beside a longer clip.
    short = np.full(16_001, 0.01, dtype=np.float32)
    long = np.full(32_000, 0.01, dtype=np.float32)
    block = "<|audio_start|><|audio_pad|><|audio_end|>"
    alone = run_processor(processor, block, [short])
    together = run_processor(processor, block + block, [short, long])
    assert int((alone["input_ids"] == AUDIO_ID).sum()) == 13
    assert together["feature_attention_mask"].sum(-1).tolist() == [101, 200]
    assert int((together["input_ids"] == AUDIO_ID).sum()) == 14 + 26


@pytest.mark.slow
def test_past_300_s_is_refused_where_the_processor_takes_it_whole(
    host, policy, processor, tmp_path
):
    rate = 16_000
    samples = 300 * rate + 160
    data = wav_bytes(make_signal("am", samples=samples, seed=5), rate_hz=rate, subtype="PCM_16")
    waveform = transformers_load(data, tmp_path, "long.wav")
    reference = run_processor(processor, render(processor, 1), [waveform])
    # truncation=False: the reference frames all of it (no silent cut to refuse here);
    # the plugin's 300 s bound refuses it as a limit.
    assert reference["feature_attention_mask"].sum() == 30_001
    with pytest.raises(LimitError, match="duration"):
        _prepare(host, policy, data)


def test_0_02_s_gives_one_row(host, policy, processor, tmp_path):
    # 0.02 s at 44.1 kHz is 882 samples → 320 at 16 kHz → 2 frames → 1 row.
    data = wav_bytes(
        make_signal("am", samples=882, rate_hz=44_100), rate_hz=44_100, subtype="PCM_16"
    )
    waveform = transformers_load(data, tmp_path, "short.wav")
    reference = run_processor(processor, render(processor, 1), [waveform])
    batch = _prepare(host, policy, data)
    assert batch.clips[0].tokens == int((reference["input_ids"] == AUDIO_ID).sum()) == 1
    assert np.abs(batch.inputs.inputs["input_features"] - reference["input_features"]).max() <= (
        TOLERANCE
    )


def test_200_samples_or_fewer_are_refused_where_the_processor_raises(host, policy, processor):
    with pytest.raises(RuntimeError):
        run_processor(processor, render(processor, 1), [np.full(200, 0.1, dtype=np.float32)])
    for samples in (0, 1, 160, 200):
        with pytest.raises(FeatureError, match="too short"):
            host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)
    assert host.plan_features(policy, rate_hz=16_000, samples=201, clip_index=0).tokens == 1
