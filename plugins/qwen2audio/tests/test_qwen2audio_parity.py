"""WAV files at 16, 44.1 and 48 kHz through the whole pipeline, against the reference loader
and ``Qwen2AudioProcessor``; and every source refusal of the Qwen2-Audio serving guide.

Reference path: transformers' ``load_audio(backend="soundfile")`` (soundfile decode, mean
downmix, soxr HQ, ``ceil`` length: ``librosa.load(sr=16000)``), then the processor.
Our path: ``audiogate.pipeline.prepare_clips`` (strict decoder, this plugin's resample
and feature hooks, collate) and this plugin's prompt expansion.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from qwen2audio_helpers import assert_parity, make_signal, transformers_load, wav_bytes

from audiogate.errors import DecodeError, FeatureError, LimitError
from audiogate.pipeline import EncodedClip, prepare_clips
from audiogate.records import ClipSlot, TextSegment
from audiogate.testing.audio import wav_bytes as canonical_wav
from audiogate_qwen2audio.prompt import expand_prompt

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("soundfile")

CASES = [
    (rate, subtype, channels, seconds)
    for rate in (16_000, 44_100, 48_000)
    for subtype, channels in (("PCM_16", 1), ("PCM_16", 2), ("FLOAT", 1), ("FLOAT", 2))
    for seconds in (1.0,)
] + [
    (16_000, "PCM_16", 1, 30.0),
    (44_100, "FLOAT", 2, 30.0),
    (48_000, "PCM_16", 2, 30.0),
    (44_100, "PCM_16", 1, 0.0201),  # 887 source samples → 322 normalized: one row
    (48_000, "FLOAT", 1, 7.3),
]


@pytest.mark.parametrize(("rate", "subtype", "channels", "seconds"), CASES)
@pytest.mark.slow
def test_wav_parity_with_the_processor(
    qwen_host, policy, tokenizer, processor, tmp_path, rate, subtype, channels, seconds
):
    samples = round(seconds * rate) + (37 if seconds == 1.0 else 0)
    data = wav_bytes(
        make_signal("am", samples=samples, rate_hz=rate, channels=channels, seed=rate + channels),
        rate_hz=rate,
        subtype=subtype,
    )
    reference_waveform = transformers_load(data, tmp_path, f"clip-{rate}.wav")

    batch = prepare_clips(qwen_host, policy, [EncodedClip(data=data, ordinal=1)])
    clip = batch.clips[0]
    # Same decode, downmix and resampler: the normalized waveforms are bit-identical.
    np.testing.assert_array_equal(clip.waveform, reference_waveform)

    rendered = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [
                    {"type": "audio", "audio_url": "x"},
                    {"type": "text", "text": "What is it?"},
                ],
            }
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    reference = processor(
        text=rendered, audio=[reference_waveform], sampling_rate=16_000, return_tensors="np"
    )
    features = batch.inputs.inputs["input_features"]
    mask = batch.inputs.inputs["feature_attention_mask"]
    assert features.shape == (1, 128, 3000)
    assert mask.dtype == reference["feature_attention_mask"].dtype
    np.testing.assert_array_equal(mask, reference["feature_attention_mask"])
    # Resampled audio has a steep stopband near 8 kHz, where the reference's float32 FFT
    # noise shows in more than a few bins: no rarity bound there, the bound still holds.
    assert_parity(
        features[0],
        reference_waveform,
        want=reference["input_features"][0],
        rare=1e-5 if rate == 16_000 else None,
    )
    assert clip.tokens == int((reference["input_ids"] == 151_646).sum())

    digest = hashlib.sha256(data).hexdigest()
    assert clip.sha256 == digest
    prompt = expand_prompt(
        policy,
        [
            TextSegment(
                rendered.replace(
                    "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n", f"[audio:{digest}]"
                )
            )
        ],
        [ClipSlot(ordinal=1, tokens=clip.tokens, frames=clip.frames, sha256=digest)],
        tokenizer,
    )
    assert list(prompt.input_ids) == reference["input_ids"][0].tolist()


def test_two_clips_of_different_rates_in_one_request(qwen_host, policy, processor, tmp_path):
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
    ]
    batch = prepare_clips(
        qwen_host, policy, [EncodedClip(data=d, ordinal=i + 1) for i, d in enumerate(datas)]
    )
    waveforms = [transformers_load(d, tmp_path, f"c{i}.wav") for i, d in enumerate(datas)]
    reference = processor.feature_extractor(
        waveforms,
        sampling_rate=16_000,
        return_attention_mask=True,
        padding="max_length",
        return_tensors="np",
    )
    np.testing.assert_array_equal(
        batch.inputs.inputs["feature_attention_mask"], reference["attention_mask"]
    )
    for index in range(2):
        assert_parity(
            batch.inputs.inputs["input_features"][index],
            waveforms[index],
            want=reference["input_features"][index],
            rare=None,
        )
    assert batch.inputs.tokens == (50, 75)
    assert batch.totals.tokens == 125


# --- the serving guide's source refusals, through the pipeline ---------------------------


def _run(qwen_host, policy, data):
    return prepare_clips(qwen_host, policy, [EncodedClip(data=data, ordinal=1)])


@pytest.mark.parametrize(
    ("rate", "code"),
    [
        (8_000, "rate_below_minimum"),
        (15_999, "rate_below_minimum"),
        (22_050, "rate_not_allowed"),
        (24_000, "rate_not_allowed"),
        (32_000, "rate_not_allowed"),
        (44_099, "rate_not_allowed"),
        (48_001, "source sample rate"),
        (96_000, "source sample rate"),
    ],
)
def test_the_strict_profile_refuses_other_rates(qwen_host, strict_policy, rate, code):
    with pytest.raises((DecodeError, LimitError)) as caught:
        _run(qwen_host, strict_policy, canonical_wav(np.full(rate, 0.1), rate_hz=rate))
    error = caught.value
    assert (error.code if isinstance(error, DecodeError) else error.limit) == code


@pytest.mark.parametrize("rate", [8_000, 11_025, 22_050, 24_000, 32_000, 44_099, 96_000, 192_000])
def test_every_rate_librosa_load_converts_is_taken(qwen_host, policy, rate):
    # librosa.load(sr=16000) resamples any rate with soxr HQ; so does the default policy.
    _run(qwen_host, policy, canonical_wav(np.full((rate // 4, 6), 0.1), rate_hz=rate))


def test_the_strict_profile_refuses_three_channels(qwen_host, strict_policy):
    with pytest.raises(LimitError) as caught:
        _run(qwen_host, strict_policy, canonical_wav(np.full((16_000, 3), 0.1), rate_hz=16_000))
    assert (caught.value.limit, caught.value.actual, caught.value.maximum) == (
        "source channels",
        3,
        2,
    )


@pytest.mark.parametrize("rate", [16_000, 44_100, 48_000])
def test_more_than_30_seconds_is_refused_not_truncated(qwen_host, policy, rate):
    long = canonical_wav(np.full(30 * rate + 1, 0.1), rate_hz=rate, encoding="pcm16")
    with pytest.raises(LimitError, match="duration"):
        _run(qwen_host, policy, long)
    exactly = _run(qwen_host, policy, canonical_wav(np.full(30 * rate, 0.1), rate_hz=rate))
    assert exactly.clips[0].tokens == 750
    assert exactly.clips[0].normalized_samples == 480_000


def test_an_exactly_all_zero_signal_is_refused(qwen_host, policy):
    with pytest.raises(DecodeError) as caught:
        _run(qwen_host, policy, canonical_wav(np.zeros(16_000), rate_hz=16_000))
    assert caught.value.code == "all_zero"
    # One quantum of signal is not silence to an exact rule.
    quiet = np.zeros(16_000)
    quiet[8_000] = 1 / 32768
    assert _run(qwen_host, policy, canonical_wav(quiet, rate_hz=16_000)).clips[0].tokens == 25


@pytest.mark.parametrize(("rate", "samples"), [(16_000, 320), (16_000, 1), (44_100, 882)])
def test_320_normalized_samples_or_fewer_are_refused(qwen_host, policy, rate, samples):
    with pytest.raises(FeatureError, match="too short"):
        _run(qwen_host, policy, canonical_wav(np.full(samples, 0.1), rate_hz=rate))


def test_321_normalized_samples_give_one_row(qwen_host, policy):
    batch = _run(qwen_host, policy, canonical_wav(np.full(321, 0.1), rate_hz=16_000))
    assert (batch.clips[0].frames, batch.clips[0].tokens) == (3, 1)


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_bytes_streamed_in_arbitrary_pieces_resample_to_the_same_samples(qwen_host, policy, rate):
    """As bytes arrive: whole frames are downmixed as the decoder does and fed to one
    ``SoxrStream``; the result equals the pipeline's whole-buffer waveform bit for bit."""
    from audiogate.resample import SoxrStream, librosa_output_length

    seconds = 2
    data = canonical_wav(
        make_signal("am", samples=seconds * rate, rate_hz=rate, channels=2, seed=9),
        rate_hz=rate,
        encoding="pcm16",
    )
    want = _run(qwen_host, policy, data).clips[0].waveform
    payload = data[44:]  # the canonical header is 44 bytes
    frames = len(payload) // 4
    stream = SoxrStream(
        in_rate_hz=rate,
        out_rate_hz=16_000,
        output_samples=librosa_output_length(frames, in_rate_hz=rate, out_rate_hz=16_000),
    )
    rng = np.random.default_rng(rate)
    pending, out, position = b"", [], 0
    while position < len(payload):
        size = int(rng.integers(1, 5_000))
        pending += payload[position : position + size]
        position += size
        whole = len(pending) // 4 * 4
        pcm = np.frombuffer(pending[:whole], dtype="<i2").reshape(-1, 2) / 32768.0
        pending = pending[whole:]
        out.append(stream.feed(pcm.mean(axis=1).astype(np.float32)))
    out.append(stream.finish())
    np.testing.assert_array_equal(np.concatenate(out), want)
