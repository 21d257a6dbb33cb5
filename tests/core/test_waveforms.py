"""AudioGate.prepare_waveforms: numpy waveforms in, the same result as the same samples
sent as a WAV, and a typed error for anything that is not a waveform."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from audiogate import AudioGate as TopLevelAudioGate
from audiogate.acquire import AcquisitionPolicy, acquire_bytes
from audiogate.api import AudioGate
from audiogate.errors import (
    AcquisitionError,
    DecodeError,
    LimitError,
    NonFiniteSampleError,
    PlaceholderError,
)
from audiogate.testing.audio import noise, wav_bytes


@pytest.fixture(scope="module")
def gate() -> AudioGate:
    return AudioGate.from_family("qwen2audio")


def _samples(seconds: float = 0.5, *, rate_hz: int = 16_000, channels: int = 1) -> np.ndarray:
    # [shape=(samples,)] or [shape=(samples, channels)], float64 in [-0.3, 0.3].
    return noise(samples=int(seconds * rate_hz), channels=channels, seed=3)


def _as_wav(gate: AudioGate, samples: np.ndarray, *, rate_hz: int, encoding: str):
    clips = acquire_bytes(
        [wav_bytes(samples, rate_hz=rate_hz, encoding=encoding)], policy=gate.acquisition
    )
    return gate.prepare(clips=clips)


def _same(a, b) -> None:
    assert len(a.features) == len(b.features)
    for x, y in zip(a.features, b.features, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert a.model_inputs.keys() == b.model_inputs.keys()
    for name in a.model_inputs:
        np.testing.assert_array_equal(
            np.asarray(a.model_inputs[name]), np.asarray(b.model_inputs[name])
        )


def test_the_entry_point_imports_from_the_package() -> None:
    assert TopLevelAudioGate is AudioGate


def test_a_float32_waveform_is_the_same_clip_as_its_float_wav(gate: AudioGate) -> None:
    samples = _samples().astype(np.float32)
    got = gate.prepare_waveforms(samples, sampling_rate=16_000)
    _same(got, _as_wav(gate, samples, rate_hz=16_000, encoding="f32"))
    assert got.batch is not None
    assert got.batch.clips[0].source_rate_hz == 16_000


def test_an_int16_waveform_is_the_same_clip_as_its_pcm16_wav(gate: AudioGate) -> None:
    samples = _samples()
    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
    got = gate.prepare_waveforms(pcm, sampling_rate=16_000)
    _same(got, _as_wav(gate, samples, rate_hz=16_000, encoding="pcm16"))


def test_a_float64_waveform_is_cast_to_float32(gate: AudioGate) -> None:
    samples = _samples()
    _same(
        gate.prepare_waveforms(samples, sampling_rate=16_000),
        gate.prepare_waveforms(samples.astype(np.float32), sampling_rate=16_000),
    )


def test_both_layouts_of_a_stereo_clip_agree_with_its_wav(gate: AudioGate) -> None:
    # 44.1 kHz stereo: downmixed and resampled by the family, as a decoded WAV is.
    samples = _samples(rate_hz=44_100, channels=2).astype(np.float32)  # (samples, channels)
    last = gate.prepare_waveforms(samples, sampling_rate=44_100, layout="channels_last")
    first = gate.prepare_waveforms(
        np.ascontiguousarray(samples.T), sampling_rate=44_100, layout="channels_first"
    )
    _same(last, first)
    _same(last, _as_wav(gate, samples, rate_hz=44_100, encoding="f32"))
    assert last.batch is not None
    assert last.batch.clips[0].channels == 2


def test_a_list_is_one_clip_per_waveform_in_order(gate: AudioGate) -> None:
    short, long = _samples(0.5), _samples(1.0)
    got = gate.prepare_waveforms([short, long], sampling_rate=16_000)
    assert got.batch is not None
    assert [c.ordinal for c in got.batch.clips] == [1, 2]
    assert [c.source_samples for c in got.batch.clips] == [8_000, 16_000]


def test_the_async_twin_gives_the_same_result(gate: AudioGate) -> None:
    samples = _samples().astype(np.float32)
    got = asyncio.run(gate.prepare_waveforms_async(samples, sampling_rate=16_000))
    _same(got, gate.prepare_waveforms(samples, sampling_rate=16_000))


@pytest.mark.parametrize(
    ("audio", "match"),
    [
        (np.zeros((2, 800), dtype=np.float32), "needs layout="),
        (np.zeros((1, 2, 800), dtype=np.float32), "1-D"),
        (np.zeros(800, dtype=np.int32), "dtype must be float32, float64 or int16"),
        (np.zeros(800, dtype=np.float16), "dtype must be"),
        (np.zeros(0, dtype=np.float32), "empty"),
        ([0.0, 0.1, 0.2], "must be a numpy array"),
        ([], "no waveform"),
    ],
    ids=["2-D without layout", "3-D", "int32", "float16", "empty", "numbers", "none"],
)
def test_what_is_not_a_waveform_is_a_typed_error(gate: AudioGate, audio, match: str) -> None:
    with pytest.raises(AcquisitionError, match=match) as caught:
        gate.prepare_waveforms(audio, sampling_rate=16_000)
    assert caught.value.origin == "waveform"


@pytest.mark.parametrize("rate", [16_000.0, "16000", True, 0, -8])
def test_a_rate_that_is_not_a_positive_int_is_refused(gate: AudioGate, rate) -> None:
    with pytest.raises(AcquisitionError, match="sampling_rate"):
        gate.prepare_waveforms(_samples(), sampling_rate=rate)


def test_an_unknown_layout_is_refused(gate: AudioGate) -> None:
    with pytest.raises(ValueError, match="layout"):
        gate.prepare_waveforms(_samples(), sampling_rate=16_000, layout="rows")  # type: ignore[arg-type]


def test_the_policy_admits_a_waveform_as_it_admits_a_decoded_clip(gate: AudioGate) -> None:
    with pytest.raises(DecodeError, match="below"):
        gate.prepare_waveforms(_samples(rate_hz=4_000), sampling_rate=4_000)
    with pytest.raises(LimitError, match="duration"):
        gate.prepare_waveforms(_samples(31.0), sampling_rate=16_000)
    nan = _samples().astype(np.float32)
    nan[100] = np.nan
    with pytest.raises(NonFiniteSampleError):
        gate.prepare_waveforms(nan, sampling_rate=16_000)


def test_the_acquisition_ceilings_apply(gate: AudioGate) -> None:
    capped = AudioGate.from_family(
        "qwen2audio", acquisition=AcquisitionPolicy(max_clips=2, max_bytes_per_clip=16_000)
    )
    with pytest.raises(LimitError, match="clip count"):
        capped.prepare_waveforms([_samples(0.1)] * 3, sampling_rate=16_000)
    with pytest.raises(LimitError):
        capped.prepare_waveforms(_samples(1.0), sampling_rate=16_000)  # 64,000 bytes as f32


def test_messages_place_the_waveforms_in_their_audio_parts() -> None:
    def render(messages) -> str:
        return "".join(
            part["text"]
            for message in messages
            for part in (
                message["content"]
                if isinstance(message["content"], list)
                else [{"type": "text", "text": message["content"]}]
            )
        )

    gate = AudioGate.from_family("qwen2audio", renderer=render)
    part = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "what?"}]}]
    got = gate.prepare_waveforms(_samples(), sampling_rate=16_000, messages=messages)
    assert got.batch is not None
    assert len(got.batch.clips) == 1
    with pytest.raises(PlaceholderError, match="1 audio part"):
        gate.prepare_waveforms([_samples(), _samples()], sampling_rate=16_000, messages=messages)
