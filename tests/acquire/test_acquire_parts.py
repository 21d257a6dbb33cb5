"""Content parts → clips: shapes, the format gate, the sniff, order, ceilings, fail-closed."""

from __future__ import annotations

import asyncio
import struct

import pytest
from acquire_helpers import audio_url, b64, input_audio, wav

from audiogate.acquire import AcquisitionPolicy, acquire_bytes, acquire_parts
from audiogate.acquire.parts import classify_source
from audiogate.cancel import CancelToken
from audiogate.decode import WAV, SourceFormat
from audiogate.decode.geometry import AUTO
from audiogate.errors import AcquisitionError, LimitError, MemoryLimitError, PreprocessCancelled
from audiogate.pipeline import EncodedClip

POLICY = AcquisitionPolicy()


def acquire(parts, policy=POLICY, **kwargs):
    return asyncio.run(acquire_parts(parts, policy=policy, **kwargs))


def raw_pcm16(samples: int = 8) -> bytes:
    return struct.pack(f"<{samples}h", *range(1, samples + 1))


def test_clips_keep_request_order_ordinals_and_origins():
    first, second = wav(800), wav(1200)
    clips = acquire(
        [
            input_audio(b64(first)),
            audio_url("data:audio/wav;base64," + b64(second)),
            input_audio("DATA:audio/x-wav;rate=16000;BASE64," + b64(first), "wave"),
        ]
    )
    assert [(c.ordinal, c.origin) for c in clips] == [
        (1, "inline base64"),
        (2, "data URI"),
        (3, "data URI"),
    ]
    assert [c.data for c in clips] == [first, second, first]
    assert all(isinstance(c, EncodedClip) for c in clips)
    # audio_url without a format: recognised from the bytes (input_audio() says "wav").
    assert [c.source_format for c in clips] == [WAV, AUTO, WAV]


def test_raw_formats_carry_their_declared_geometry():
    data = raw_pcm16()
    (clip,) = acquire([input_audio(b64(data), "pcm16", sample_rate=8000, channels=2)])
    assert clip.source_format == SourceFormat.raw("pcm16", rate_hz=8000, channels=2)
    (clip,) = acquire(
        [
            audio_url(
                "data:audio/pcm;base64," + b64(data), format="F32", sample_rate=16000, channels=1
            )
        ]
    )
    assert clip.source_format == SourceFormat.raw("f32", rate_hz=16000, channels=1)


def test_an_empty_request_acquires_nothing():
    assert acquire([]) == []


def test_a_bad_second_clip_rejects_the_whole_request_naming_it():
    with pytest.raises(AcquisitionError) as caught:
        acquire([input_audio(b64(wav())), input_audio("QUJD=")])
    assert caught.value.clip_index == 1
    assert caught.value.origin == "inline base64"
    assert "audio clip 2 (inline base64)" in str(caught.value)


@pytest.mark.parametrize(
    ("part", "origin", "needle"),
    [
        ("not a mapping", "content part", "must be an object"),
        ({"type": "image_url", "image_url": {"url": "x"}}, "content part", "not an audio part"),
        ({"type": ["input_audio"]}, "content part", "not an audio part"),  # unhashable
        ({"type": {"a": 1}}, "content part", "not an audio part"),
        ({"type": "input_audio"}, "content part", "must be an object"),
        ({"type": "input_audio", "input_audio": {"format": "wav"}}, "content part", "non-empty"),
        (input_audio(""), "content part", "non-empty"),
        (
            {"type": "input_audio", "input_audio": {"data": 5, "format": "wav"}},
            "content part",
            "string",
        ),
        ({**input_audio("QUJD"), "extra": 1}, "content part", "unknown keys"),
        (input_audio("QUJD", detail="high"), "content part", "unknown keys"),
        (input_audio("QUJD", "wma"), "inline base64", "'wma' is not supported"),
        (input_audio("QUJD", "amr"), "inline base64", "'mp3', 'flac'"),
        (input_audio("QUJD", "mp3"), "inline base64", "expected MP3, sniffed"),
        (input_audio("QUJD", "pcm16"), "inline base64", "sample_rate"),
        (input_audio("QUJD", "pcm16", sample_rate=16000), "inline base64", "channels"),
        (input_audio("QUJD", "f32", sample_rate=16000, channels=True), "inline base64", "True"),
        (input_audio("QUJD", "f32", sample_rate=0, channels=1), "inline base64", ">= 1"),
        (input_audio("QUJD", "wav", sample_rate=16000), "inline base64", "only for raw"),
        (audio_url("ftp://example.com/a.wav"), "content part", "scheme 'ftp'"),
        (audio_url("gopher://x"), "content part", "not supported"),
        (audio_url("data:audio/wav;base64,QUJD", format="flac"), "data URI", "flac"),
    ],
)
def test_malformed_parts_are_refused_with_clip_and_origin(part, origin, needle):
    with pytest.raises(AcquisitionError, match=needle) as caught:
        acquire([input_audio(b64(wav())), part])
    assert (caught.value.clip_index, caught.value.origin) == (1, origin)


@pytest.mark.parametrize(
    ("value", "origin"),
    [
        ("QUJD", "inline base64"),
        ("QUJD\nQUJD", "inline base64"),
        ("abc", "inline base64"),
        ("x" * 5000 + ".wav", "inline base64"),
        ("data:audio/wav;base64,QUJD", "data URI"),
        ("Data:audio/wav;base64,QUJD", "data URI"),
        ("http://example.com/a.wav", "URL"),
        ("HTTPS://example.com/a.wav", "URL"),
        ("file:///a.wav", "file"),
        ("FILE://a.wav", "file"),
        ("clip.wav", "file"),
        ("sub/clip-1.wav", "file"),
        ("my clip", "file"),
        ("/abs/clip.wav", "file"),
    ],
)
def test_sources_are_classified_by_syntax_alone(value, origin):
    assert classify_source(value) == origin


@pytest.mark.parametrize(
    ("data", "fmt", "extra", "needle"),
    [
        (raw_pcm16(), "wav", {}, "expected RIFF/WAVE, sniffed no container signature"),
        (b"RIFF\x10\0\0\0AVI LIST", "wav", {}, "sniffed RIFF (not WAVE)"),
        (b"fLaC\0\0\0\x22" + bytes(40), "wav", {}, "sniffed FLAC"),
        (b"OggS" + bytes(40), "wav", {}, "sniffed Ogg"),
        (b"ID3\x03" + bytes(40), "wav", {}, "sniffed MP3"),
        (b"RIF", "wav", {}, "sniffed no container signature"),
        (wav(), "pcm16", {"sample_rate": 16000, "channels": 1}, "sniffed RIFF/WAVE"),
        (b"fLaC" + bytes(8), "f32", {"sample_rate": 16000, "channels": 1}, "sniffed FLAC"),
    ],
)
def test_the_declared_format_must_match_the_sniffed_bytes(data, fmt, extra, needle):
    with pytest.raises(AcquisitionError, match="does not match the bytes") as caught:
        acquire([input_audio(b64(data), fmt, **extra)])
    assert needle in str(caught.value)
    assert caught.value.origin == "inline base64"


def test_an_empty_source_is_refused():
    with pytest.raises(AcquisitionError, match="empty"):
        acquire([audio_url("data:audio/wav;base64,")])


def test_too_many_parts_are_refused_before_any_is_looked_at():
    parts = [audio_url("file:///never-read.wav")] * 17
    with pytest.raises(LimitError) as caught:
        acquire(parts)
    assert (caught.value.limit, caught.value.actual, caught.value.maximum) == ("clip count", 17, 16)
    with pytest.raises(LimitError, match="clip count"):
        acquire([{"garbage": True}] * 3, AcquisitionPolicy(max_clips=2))


def test_each_clip_is_read_against_what_is_left_of_the_request():
    first = wav(800)  # 1644 bytes
    policy = AcquisitionPolicy(max_bytes_per_clip=2000, max_bytes_per_request=3001)
    assert len(acquire([input_audio(b64(first))], policy)) == 1
    # 1357 bytes are left. 1358 bytes pass the character preflight (ceil(1357/3)*4 = 1812
    # characters) but not the exact decoded size, checked before decoding.
    second = wav(657)
    assert len(second) == 1358
    assert len(b64(second)) == 1812
    with pytest.raises(MemoryLimitError) as caught:
        acquire([input_audio(b64(first)), input_audio(b64(second))], policy)
    error = caught.value
    assert (error.limit, error.clip_index) == ("encoded bytes per request", 1)
    assert (error.actual, error.maximum) == (1644 + 1358, 3001)
    # A larger second clip is refused from its character count alone.
    with pytest.raises(LimitError) as caught:
        acquire([input_audio(b64(first)), input_audio(b64(first))], policy)
    assert (caught.value.limit, caught.value.actual, caught.value.maximum) == (
        "base64 characters",
        len(b64(first)),
        1812,
    )


def test_the_per_clip_cap_binds_when_it_is_the_smaller():
    policy = AcquisitionPolicy(max_bytes_per_clip=1000)
    with pytest.raises(LimitError) as caught:
        acquire([input_audio(b64(wav(800)))], policy)
    assert not isinstance(caught.value, MemoryLimitError)
    assert (caught.value.limit, caught.value.clip_index) == ("base64 characters", 0)


def test_a_cancelled_token_stops_before_anything_is_read():
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled) as caught:
        acquire([input_audio(b64(wav()))], cancel=token)
    assert caught.value.checkpoint == "Acquisition"


def test_parts_must_be_a_sequence():
    with pytest.raises(TypeError):
        acquire({"type": "input_audio"})  # type: ignore[arg-type]


# --- acquire_bytes -------------------------------------------------------------------


def test_acquire_bytes_admits_bytes_with_the_same_checks():
    data = wav()
    clips = acquire_bytes([data, bytearray(data), memoryview(data)], policy=POLICY)
    assert [(c.ordinal, c.origin, c.data) for c in clips] == [
        (1, "bytes", data),
        (2, "bytes", data),
        (3, "bytes", data),
    ]
    with pytest.raises(AcquisitionError, match="empty") as caught:
        acquire_bytes([data, b""], policy=POLICY)
    assert (caught.value.clip_index, caught.value.origin) == (1, "bytes")
    with pytest.raises(AcquisitionError, match="does not match"):
        acquire_bytes([raw_pcm16()], policy=POLICY)
    raw = SourceFormat.raw("pcm16", rate_hz=16000, channels=1)
    (clip,) = acquire_bytes([raw_pcm16()], policy=POLICY, source_format=[raw])
    assert clip.source_format == raw
    with pytest.raises(TypeError):
        acquire_bytes([data, data], policy=POLICY, source_format=[WAV])


def test_acquire_bytes_enforces_count_and_byte_ceilings():
    data = wav(800)
    with pytest.raises(LimitError, match="clip count"):
        acquire_bytes([data] * 3, policy=AcquisitionPolicy(max_clips=2))
    with pytest.raises(LimitError) as caught:
        acquire_bytes([data], policy=AcquisitionPolicy(max_bytes_per_clip=len(data) - 1))
    assert (caught.value.limit, caught.value.actual) == ("encoded bytes per clip", len(data))
    with pytest.raises(MemoryLimitError) as caught:
        acquire_bytes([data, data], policy=AcquisitionPolicy(max_bytes_per_request=len(data) + 1))
    assert (caught.value.actual, caught.value.clip_index) == (2 * len(data), 1)
