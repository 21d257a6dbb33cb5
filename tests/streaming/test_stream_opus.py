"""Compressed streams (#34): Ogg and WebM Opus decode as their bytes arrive, in a decoder
process, to the whole clip's samples bit for bit; other formats accumulate and take the
whole-clip path at the end; limits, errors, cancellation and the decoder's reuse."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_helpers import byte_chunks, family_host, policy_of, same_clip, whole_clip

from audiogate.budget import ByteBudget
from audiogate.decode.geometry import SourceFormat
from audiogate.decode.isolation import DecoderFailedError, DecoderPool
from audiogate.decode.remux import remux_webm_opus
from audiogate.decode.stream_remux import WebmOpusRemuxer
from audiogate.errors import CodecsUnavailableError, DecodeError, EmptyAudioError, LimitError
from audiogate.streaming.compressed import FORWARD_BYTES
from audiogate.streaming.transport import prepare_stream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_webm_remux import _matroska, _ogg_opus_packets, _sndfile_48k

CORPUS = Path(__file__).resolve().parents[1] / "data" / "audio"
STREAMED = [
    "opus-mono-16000.opus",
    "opus-stereo-48000.opus",
    "webm-opus-mono-16000.webm",
    "webm-opus-6ch-48000.webm",
    "mediarecorder-chromium-opus-mono-48000.webm",
    "mka-opus-mono-24000.mka",
]
#: One incremental (Whisper) family and one accumulating family.
FAMILIES = ["qwen2audio", "gemma3n"]
OPUS = SourceFormat("opus")


@pytest.fixture(scope="module")
def pool() -> DecoderPool:
    decoders = DecoderPool(processes=1)
    yield decoders
    decoders.close()


def _read(name: str) -> bytes:
    return (CORPUS / name).read_bytes()


def _stream(
    data: bytes,
    sizes: list[int],
    pool: DecoderPool,
    *,
    family: str = "qwen2audio",
    source_format: SourceFormat = OPUS,
    budget: ByteBudget | None = None,
    policy=None,
):
    return asyncio.run(
        prepare_stream(
            family_host(),
            policy or policy_of(family),
            byte_chunks(data, sizes),
            source_format=source_format,
            budget=budget,
            decoders=pool,
        )
    )


def _twenty_ms(data: bytes, seconds: float) -> int:
    """Bytes per 20 ms of the file on average (a MediaRecorder's timeslice)."""
    return max(1, round(len(data) * 0.02 / seconds))


# --- the remuxer, in this process ----------------------------------------------------------


@pytest.fixture(scope="module")
def opus_packets() -> tuple[bytes, list[bytes], int]:
    return _ogg_opus_packets()


def _remux_in_chunks(data: bytes, sizes: list[int]) -> bytes:
    remuxer = WebmOpusRemuxer()
    out = [remuxer.feed(data[part]) for part in _slices(len(data), sizes)]
    return b"".join(out) + remuxer.finish()


def _slices(total: int, sizes: list[int]) -> list[slice]:
    parts, start, index = [], 0, 0
    while start < total:
        size = sizes[index % len(sizes)]
        parts.append(slice(start, min(total, start + size)))
        start, index = start + size, index + 1
    return parts


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lacing=st.sampled_from(["none", "xiph", "ebml", "fixed"]),
    live=st.booleans(),
    sizes=st.lists(st.integers(1, 700), min_size=1, max_size=6),
)
def test_the_incremental_remux_decodes_as_the_whole_file_remux(opus_packets, lacing, live, sizes):
    head, packets, trim = opus_packets
    data = _matroska(head, packets, trim, lacing=lacing, live=live, video=live)
    whole = _sndfile_48k(remux_webm_opus(data).data)
    np.testing.assert_array_equal(_sndfile_48k(_remux_in_chunks(data, sizes)), whole)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda h, p, t: _matroska(h, p, 0, codec=b"A_VORBIS"), "unsupported_codec"),
        (lambda h, p, t: _matroska(b"OpusHeaX" + h[8:], p, 0), "malformed_header"),
        (lambda h, p, t: _matroska(h, p, t, last_in_group=False), "decoder_error"),
        (lambda h, p, t: _matroska(h, p, 0)[:-7], "decoder_error"),  # truncated
        (lambda h, p, t: b"\x1a\x45\xdf\xa3\x80", "malformed_header"),
        (lambda h, p, t: b"OggS" + bytes(40), "malformed_header"),
    ],
)
def test_the_incremental_remux_refuses_as_the_whole_file_remux(opus_packets, change, code):
    head, packets, trim = opus_packets
    data = change(head, packets[:20], trim)
    with pytest.raises(DecodeError) as whole:
        remux_webm_opus(data)
    for sizes in ([1], [37, 5], [len(data)]):
        with pytest.raises(DecodeError) as streamed:
            _remux_in_chunks(data, sizes)
        assert streamed.value.code == whole.value.code == code


# --- prepare_stream against the whole clip ---------------------------------------------------


@pytest.mark.parametrize("name", STREAMED)
@pytest.mark.parametrize("family", FAMILIES)
def test_opus_streams_in_20_ms_chunks_are_the_whole_clip(name, family, pool):
    data = _read(name)
    whole = whole_clip(policy_of(family), data, OPUS)
    seconds = whole.duration_us / 1e6
    budget = ByteBudget(1 << 30, limit="stream bytes")
    streamed = _stream(data, [_twenty_ms(data, seconds)], pool, family=family, budget=budget)
    same_clip(streamed, whole)
    assert streamed.sha256 == whole.sha256
    assert budget.held == 0
    assert pool.live_processes == 1  # one process, reused by every stream


@pytest.mark.parametrize("name", ["opus-mono-8000.opus", "webm-opus-mono-16000.webm"])
def test_one_byte_chunks_are_the_whole_clip(name, pool):
    data = _read(name)
    same_clip(_stream(data, [1], pool), whole_clip(policy_of("qwen2audio"), data, OPUS))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["opus-mono-44100.opus", "webm-opus-stereo-48000.webm"]),
    sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=8),
    declared=st.sampled_from(["opus", "auto"]),
)
def test_any_chunking_is_the_whole_clip(name, sizes, declared, pool):
    data = _read(name)
    fmt = SourceFormat(
        declared if declared == "auto" else name.rsplit(".", 1)[1].replace("opus", "ogg")
    )
    same_clip(
        _stream(data, sizes, pool, source_format=fmt),
        whole_clip(policy_of("qwen2audio"), data, fmt),
    )


@pytest.mark.parametrize(
    ("name", "container", "share"),
    [
        # A WebM packet decodes once the next arrives: all but the last batch early.
        ("mediarecorder-chromium-opus-mono-48000.webm", "webm", 0.8),
        # An Ogg page decodes once complete: this file's pages hold about a second.
        ("opus-stereo-48000.opus", "ogg", 0.35),
    ],
)
def test_samples_arrive_before_the_stream_ends(name, container, share, pool):
    """Incremental: most samples are decoded before the stream's last bytes; the end
    leaves the last batch, page or packet and its trimming."""
    data = _read(name)
    tail = 200
    stream = pool.open_stream(container, clip_index=0)
    try:
        early = sum(
            b.shape[0]
            for part in _slices(len(data) - tail, [FORWARD_BYTES])
            for b in stream.feed(data[part])
        )
        late = sum(b.shape[0] for b in stream.feed(data[len(data) - tail :]))
        late += sum(b.shape[0] for b in stream.finish())
    finally:
        stream.close()
    assert early > share * (early + late)
    assert stream.done
    assert pool.live_processes == 1


@pytest.mark.parametrize(
    "name",
    [
        "mp3-cbr64-stereo-24000.mp3",
        "flac-s16-mono-8000.flac",
        "vorbis-mono-16000.ogg",
        "aac-mono-24000.m4a",
        "wav-ima-adpcm-mono-16000.wav",
    ],
)
def test_other_formats_are_prepared_at_the_end_as_the_whole_clip(name, pool):
    data = _read(name)
    auto = SourceFormat("auto")
    budget = ByteBudget(1 << 30, limit="stream bytes")
    streamed = _stream(data, [333], pool, source_format=auto, budget=budget)
    same_clip(streamed, whole_clip(policy_of("qwen2audio"), data, auto))
    assert budget.held == 0


# --- errors, limits, cancellation -------------------------------------------------------------


def _pid(pool: DecoderPool) -> int:
    (child,) = pool._idle
    return child.process.pid


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d[: len(d) // 2], DecodeError),  # a WebM cut inside an element
        (lambda d: d[:40] + bytes(len(d) - 40), DecodeError),  # garbled after the header
        (lambda d: b"", EmptyAudioError),
    ],
)
def test_truncated_or_garbled_streams_are_typed_errors_and_keep_the_decoder(change, error, pool):
    _stream(_read("opus-mono-8000.opus"), [999], pool)
    pid = _pid(pool)
    with pytest.raises(error):
        _stream(change(_read("webm-opus-mono-16000.webm")), [100], pool)
    assert _pid(pool) == pid


def test_a_garbled_ogg_stream_is_a_typed_error(pool):
    data = bytearray(_read("opus-mono-16000.opus"))
    data[200:600] = bytes(400)
    with pytest.raises(DecodeError):
        whole_clip(policy_of("qwen2audio"), bytes(data), OPUS)
    with pytest.raises(DecodeError):
        _stream(bytes(data), [100], pool)


def test_a_webm_without_frames_is_empty(opus_packets, pool):
    data = _matroska(opus_packets[0], [], 0)
    with pytest.raises(EmptyAudioError):
        _stream(data, [50], pool)


@pytest.mark.parametrize("name", ["opus-stereo-48000.opus", "webm-opus-stereo-48000.webm"])
def test_the_duration_cap_refuses_the_block_that_crosses_it(name, pool):
    policy = attrs.evolve(policy_of("qwen2audio"), max_duration_seconds=1)
    data = _read(name)
    budget = ByteBudget(1 << 30, limit="stream bytes")
    with pytest.raises(LimitError) as streamed:
        _stream(data, [200], pool, policy=policy, budget=budget)
    with pytest.raises(LimitError):
        whole_clip(policy, data, OPUS)  # (the Ogg's: its decoder overran the bound's plan)
    assert streamed.value.limit == "source duration per clip"
    assert streamed.value.maximum == 1_000_000
    assert budget.held == 0
    assert pool.live_processes == 1


def test_the_byte_cap_refuses_the_chunk_that_crosses_it(pool):
    data = _read("webm-opus-stereo-48000.webm")
    policy = attrs.evolve(policy_of("qwen2audio"), max_encoded_bytes_per_clip=10_000)
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for start in range(0, len(data), 1000):
            sent += 1
            yield data[start : start + 1000]

    with pytest.raises(LimitError) as caught:
        asyncio.run(
            prepare_stream(family_host(), policy, chunks(), source_format=OPUS, decoders=pool)
        )
    assert caught.value.limit == "encoded bytes per clip"
    assert sent == 11


def test_a_cancelled_stream_releases_everything_and_reuses_the_decoder(pool):
    data = _read("webm-opus-stereo-48000.webm")
    _stream(data, [999], pool)
    pid = _pid(pool)
    budget = ByteBudget(1 << 30, limit="stream bytes")
    started = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        for start in range(0, len(data) // 2, 500):
            yield data[start : start + 500]
        started.set()
        await asyncio.sleep(3600)
        yield data[len(data) // 2 :]

    async def scenario() -> None:
        task = asyncio.create_task(
            prepare_stream(
                family_host(),
                policy_of("qwen2audio"),
                stalls(),
                source_format=OPUS,
                budget=budget,
                decoders=pool,
            )
        )
        await started.wait()
        assert budget.held > 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert budget.held == 0
    assert _pid(pool) == pid  # aborted, not killed
    same_clip(_stream(data, [777], pool), whole_clip(policy_of("qwen2audio"), data, OPUS))


def test_a_missing_decoder_extra_is_refused_at_the_start(monkeypatch, pool):
    import audiogate.decode.isolation as isolation

    monkeypatch.setattr(isolation, "installed", lambda module: module != "soundfile")
    data = _read("opus-mono-16000.opus")
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for start in range(0, len(data), 500):
            sent += 1
            yield data[start : start + 500]

    with pytest.raises(CodecsUnavailableError):
        asyncio.run(
            prepare_stream(
                family_host(), policy_of("qwen2audio"), chunks(), source_format=OPUS, decoders=pool
            )
        )
    assert sent == 1


def test_random_chunkings_of_many_streams_leave_one_process(pool):
    rng = random.Random(34)
    for name in ("opus-6ch-48000.opus", "webm-opus-6ch-48000.webm"):
        data = _read(name)
        sizes = [rng.randint(1, 900) for _ in range(7)]
        same_clip(_stream(data, sizes, pool), whole_clip(policy_of("qwen2audio"), data, OPUS))
    assert pool.live_processes == 1


def test_a_chained_ogg_stream_falls_back_to_the_whole_clip(pool):
    """libsndfile reads one link of a stream: a second link makes the stream fall back,
    and it is the whole clip's (every link) at the end."""
    link = _read("opus-mono-16000.opus")
    data = link + link
    whole = whole_clip(policy_of("qwen2audio"), data, OPUS)
    assert whole.source_samples == 2 * 72_000
    budget = ByteBudget(1 << 30, limit="stream bytes")
    same_clip(_stream(data, [300], pool, budget=budget), whole)
    assert budget.held == 0
    assert pool.live_processes == 1


def _open_descriptors() -> dict[str, str]:
    """This process's open descriptors, each with what it refers to."""
    opened = {}
    for fd in os.listdir("/proc/self/fd"):  # (its own descriptor is closed when it returns)
        with contextlib.suppress(OSError):  # (that one: gone)
            opened[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return opened


@pytest.mark.parametrize(
    ("hook", "code"), [("abort", "decoder_crashed"), ("hang", "decoder_timeout")]
)
def test_a_decoder_that_dies_or_hangs_mid_stream_fails_the_stream_only(hook, code):
    gc.collect()  # earlier tests' garbage closes its descriptors before the count, not during
    fds = _open_descriptors()
    broken = DecoderPool(processes=1, cpu_seconds=1, test_hook=hook)
    broken.wall_seconds = 1
    budget = ByteBudget(1 << 30, limit="stream bytes")
    try:
        with pytest.raises(DecoderFailedError) as caught:
            _stream(_read("webm-opus-mono-16000.webm"), [300], broken, budget=budget)
        assert caught.value.code == code
        assert broken.live_processes == 0
        assert budget.held == 0
    finally:
        broken.close()
    # Every descriptor open now was open before, on the same file: none leaked (one that
    # an earlier test's leftovers closed meanwhile is not this test's).
    assert _open_descriptors().items() <= fds.items()


def test_an_auto_wav_stream_is_decoded_here_as_a_wav_stream(pool):
    data = _read("wav-s16-stereo-11025.wav")
    auto = SourceFormat("auto")
    same_clip(
        _stream(data, [1, 64, 7], pool, source_format=auto),
        whole_clip(policy_of("qwen2audio"), data, auto),
    )


def test_a_webm_of_another_codec_falls_back_with_the_whole_clip_s_result(opus_packets, pool):
    head, packets, _ = opus_packets
    data = _matroska(head, packets[:20], 0, codec=b"A_VORBIS")
    with pytest.raises(DecodeError) as whole:
        whole_clip(policy_of("qwen2audio"), data, SourceFormat("webm"))
    with pytest.raises(DecodeError) as streamed:
        _stream(data, [100], pool, source_format=SourceFormat("webm"))
    assert (streamed.value.code, str(streamed.value)) == (whole.value.code, str(whole.value))
    assert pool.live_processes == 1


@pytest.mark.parametrize("name", ["wav-ms-adpcm-stereo-22050.wav", "wav-gsm610-mono-8000.wav"])
def test_a_codec_wav_stream_is_prepared_at_the_end_as_the_whole_clip(name, pool):
    data = _read(name)
    wav = SourceFormat("wav")
    budget = ByteBudget(1 << 30, limit="stream bytes")
    streamed = _stream(data, [40, 3], pool, source_format=wav, budget=budget)
    same_clip(streamed, whole_clip(policy_of("qwen2audio"), data, wav))
    assert budget.held == 0
