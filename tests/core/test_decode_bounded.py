"""Decoding work stops at a clip's plan (issue #32): the WebM remux walks up to the cap,
not the file; a decoder stops one block past the plan and stays alive for the next clip;
codec padding past a capped plan is trimmed, a stream that goes on is refused. Work is
counted (elements walked, frames read), never timed."""

from __future__ import annotations

import io

import attrs
import numpy as np
import pytest
from codec_fixtures import encode, tone
from test_webm_remux import _matroska, _ogg_opus_packets, _toc_samples

from audiogate.decode import DecodeLimits, decode, inspect
from audiogate.decode import child as decoder_child
from audiogate.decode.geometry import AUTO
from audiogate.decode.isolation import DecoderPool
from audiogate.decode.remux import element_budget, remux_webm_opus
from audiogate.errors import DecodeError, LimitError

pytestmark = pytest.mark.slow

RATE = 48_000


@pytest.fixture(scope="module")
def opus() -> tuple[bytes, list[bytes]]:
    head, packets, _trim = _ogg_opus_packets()
    return head, packets


def _long_live_webm(head: bytes, packets: list[bytes], seconds: float) -> tuple[bytes, int]:
    """A MediaRecorder-shaped WebM (unknown sizes, no Duration) of the corpus packets
    repeated to ``seconds``; returns the bytes and the packet count."""
    per_pass = sum(_toc_samples(p) for p in packets)
    repeats = int(seconds * RATE // per_pass) + 1
    body = packets * repeats
    return _matroska(head, body, 0, live=True), len(body)


@pytest.fixture
def pool():
    pool = DecoderPool(processes=1)
    yield pool
    pool.close()
    assert pool.live_processes == 0


def _pid(pool: DecoderPool) -> int:
    (child,) = pool._idle
    return child.process.pid


def test_the_remux_walks_to_the_cap_not_to_the_end(opus):
    head, packets = opus
    data, count = _long_live_webm(head, packets, 300.0)
    whole = remux_webm_opus(data)
    assert not whole.stopped
    assert whole.packets == count
    cap = 30 * RATE
    capped = remux_webm_opus(data, stop_after=cap)
    assert capped.stopped
    # It read what the cap needs (one packet more), a tenth of the file's elements.
    assert cap < capped.samples <= cap + 2 * 5760
    assert capped.elements < whole.elements / 8
    assert capped.elements <= element_budget(cap)


def test_a_file_of_elements_that_hold_no_audio_is_refused_within_its_budget(opus):
    head, packets = opus
    data = _matroska(head, packets[:5], 0, live=True)
    # Twenty thousand Void elements before the audio: the walk gives up at its budget.
    voids = b"\xec\x80" * 20_000
    cluster = data.index(b"\x1f\x43\xb6\x75")
    hostile = data[:cluster] + voids + data[cluster:]
    with pytest.raises(DecodeError) as info:
        remux_webm_opus(hostile, stop_after=100)
    assert "elements read" in info.value.detail
    assert remux_webm_opus(hostile).packets == 5  # no cap: read whole


def test_a_live_webm_past_the_cap_is_refused_by_a_decoder_that_stays(opus, pool):
    head, packets = opus
    data, _count = _long_live_webm(head, packets, 120.0)
    limits = DecodeLimits(max_duration_us=30_000_000)
    # Admission measures it past the cap and refuses it from its packets ...
    with pytest.raises(LimitError) as refused:
        inspect(data, clip_index=0, source_format=AUTO, limits=limits)
    assert refused.value.limit == "source duration per clip"
    # ... and a plan at the cap (what admission gives a file it could not measure to the
    # end) is refused by the decoder, from the remux walk.
    measured = inspect(data, clip_index=0, source_format=AUTO)
    geometry = attrs.evolve(
        measured, frames=30 * RATE, duration_us=30_000_000, exact=False, padding_frames=5_760
    )
    short = _matroska(head, packets, 0, live=True)
    short_geometry = inspect(short, clip_index=0, source_format=AUTO, limits=limits)
    decode(short, short_geometry, clip_index=0, decoders=pool, limits=limits)
    before = _pid(pool)
    for _ in range(3):
        with pytest.raises(LimitError) as info:
            decode(data, geometry, clip_index=2, decoders=pool, limits=limits)
        assert info.value.maximum == geometry.frames
        assert info.value.clip_index == 2
    # The refusals were the decoder's own: the same process, still serving.
    assert pool.live_processes == 1
    assert _pid(pool) == before
    decode(short, short_geometry, clip_index=0, decoders=pool, limits=limits)
    assert _pid(pool) == before


def _child_decode(data: bytes, header: dict, monkeypatch) -> tuple[list[tuple[bytes, int]], int]:
    """Run the decoder process's loop here; returns the frames it sent and frames read."""
    monkeypatch.setattr(decoder_child, "_limit_cpu", lambda seconds: None)
    out = io.BytesIO()
    try:
        read = decoder_child._decode(data, header, out)
    except decoder_child._OverPlan as over:
        read = -over.frames
    raw, frames, offset = out.getvalue(), [], 0
    while offset < len(raw):
        tag, length = decoder_child.FRAME.unpack_from(raw, offset)
        offset += decoder_child.FRAME.size + length
        frames.append((tag, length))
    return frames, read


@pytest.mark.parametrize("fmt", ["flac", "mp3", "ogg", "webm", "m4a"])
def test_a_decoder_reads_one_block_past_the_plan_and_sends_nothing_past_it(fmt, monkeypatch):
    data = encode(fmt, tone(rate_hz=16_000, seconds=4.0), rate_hz=16_000)
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    header = {
        "container": geometry.container,
        "codec": geometry.encoding,
        "rate_hz": geometry.rate_hz,
        "channels": 1,
        "max_frames": 8_000,
        "block_frames": 4_096,
        "cpu_seconds": 1,
    }
    sent, read = _child_decode(data, header, monkeypatch)
    assert read < 0, "refused"
    # One block past the plan, not the stream's 4 s; WebM Opus: the remux stops one
    # packet past it and nothing is decoded.
    remuxed = fmt == "webm"
    assert -read <= 8_000 + (2 * 5_760 if remuxed else 4_096)
    sent_bytes = sum(length for tag, length in sent if tag == decoder_child.BLOCK)
    assert sent_bytes == (0 if remuxed else 8_000 * 4)
    # A prefix stops at its last frame and ends cleanly.
    sent, read = _child_decode(data, {**header, "prefix": True}, monkeypatch)
    assert 8_000 <= read <= 8_000 + 4_096
    assert sent[-1] == (decoder_child.DONE, 0)


def test_padding_within_a_codec_frame_past_a_capped_plan_is_trimmed(opus, pool):
    head, packets = opus
    data = _matroska(head, packets, 0, live=True)
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    whole = decode(data, geometry, clip_index=0, decoders=pool)
    # The plan a 'just at the cap' policy makes: a little less than the stream holds.
    capped = attrs.evolve(
        geometry,
        frames=whole.shape[0] - 1_000,
        duration_us=(whole.shape[0] - 1_000) * 1_000_000 // RATE,
        padding_frames=5_760,
    )
    trimmed = decode(data, capped, clip_index=0, decoders=pool)
    np.testing.assert_array_equal(trimmed, whole[: capped.frames])
    # Without the padding allowance (or past it) it is refused, by a decoder that stays.
    before = _pid(pool)
    for padding in (0, 500):
        with pytest.raises(LimitError):
            decode(data, attrs.evolve(capped, padding_frames=padding), clip_index=0, decoders=pool)
    assert _pid(pool) == before


def test_a_codec_message_never_shows_an_object_repr(pool):
    mp3 = encode("mp3", tone(rate_hz=16_000, seconds=1.0), rate_hz=16_000)
    geometry = inspect(mp3, clip_index=0, source_format=AUTO)
    broken = mp3[:4] + bytes(len(mp3) - 4)  # libsndfile: "Error opening <_io.BytesIO ...>"
    with pytest.raises(DecodeError) as info:
        decode(broken, geometry, clip_index=0, decoders=pool)
    assert info.value.code == "decoder_error"
    assert "libsndfile refused the stream: Error opening the stream" in str(info.value)
    assert " at 0x" not in str(info.value)
    assert "BytesIO" not in str(info.value)
    assert decoder_child.clean_detail("Error opening <_io.BytesIO object at 0x7f00ab>: bad") == (
        "Error opening the stream: bad"
    )
