"""The decoder processes: crash, hang, memory, lying headers and cancellation are typed
errors for their clip, the pool replaces what died, and nothing leaks (issue #20)."""

from __future__ import annotations

import os
import threading

import attrs
import numpy as np
import pytest
from codec_fixtures import encode, tone

from audiogate.cancel import CancelToken
from audiogate.decode import decode, inspect
from audiogate.decode.geometry import AUTO
from audiogate.decode.isolation import DecoderFailedError, DecoderPool
from audiogate.errors import DecodeError, LimitError, PreprocessCancelled

pytestmark = pytest.mark.slow

SIGNAL = tone(rate_hz=16_000, seconds=1.0, channels=1)


@pytest.fixture(scope="module")
def mp3():
    return encode("mp3", SIGNAL, rate_hz=16_000)


@pytest.fixture(scope="module")
def flac():
    return encode("flac", SIGNAL, rate_hz=16_000)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def pool():
    before = _open_fds()
    pool = DecoderPool(processes=1, cpu_seconds=1)
    yield pool
    pool.close()
    assert pool.live_processes == 0
    assert _open_fds() == before


def _pool(hook: str, **kwargs) -> DecoderPool:
    return DecoderPool(processes=1, test_hook=hook, **kwargs)


def _geometry(data: bytes):
    return inspect(data, clip_index=0, source_format=AUTO)


def test_a_decoder_that_aborts_is_decoder_crashed_and_is_replaced(flac):
    geometry = _geometry(flac)
    crashing = _pool("abort")
    with pytest.raises(DecoderFailedError) as info:
        decode(flac, geometry, clip_index=4, decoders=crashing)
    assert info.value.code == "decoder_crashed"
    assert info.value.clip_index == 4
    assert crashing.live_processes == 0
    crashing.close()
    # A healthy pool keeps serving after one of its processes died.
    healthy = DecoderPool(processes=1)
    try:
        assert decode(flac, geometry, clip_index=0, decoders=healthy).shape == (16_000,)
    finally:
        healthy.close()


def test_a_decoder_spinning_past_its_cpu_cap_is_decoder_timeout(flac):
    spinning = _pool("spin", cpu_seconds=1)
    # The CPU cap is the one that must end it: a loaded machine gives one CPU second
    # past the default wall-clock deadline (2 x 1 + 5 s).
    spinning.wall_seconds = 600
    try:
        with pytest.raises(DecoderFailedError) as info:
            decode(flac, _geometry(flac), clip_index=0, decoders=spinning)
        assert info.value.code == "decoder_timeout"
        assert "CPU" in str(info.value)
    finally:
        spinning.close()


def test_a_decoder_that_hangs_is_decoder_timeout(flac):
    hanging = _pool("hang", cpu_seconds=1)
    hanging.wall_seconds = 1
    try:
        with pytest.raises(DecoderFailedError) as info:
            decode(flac, _geometry(flac), clip_index=0, decoders=hanging)
        assert info.value.code == "decoder_timeout"
        assert hanging.live_processes == 0
    finally:
        hanging.close()


def test_a_decoder_past_its_address_space_is_decoder_memory_limit(flac):
    greedy = _pool("allocate", address_space_bytes=1 << 30)
    try:
        with pytest.raises(DecoderFailedError) as info:
            decode(flac, _geometry(flac), clip_index=0, decoders=greedy)
        assert info.value.code == "decoder_memory_limit"
    finally:
        greedy.close()


def test_a_stream_longer_than_its_header_stops_at_the_plan(pool, mp3):
    # What a lying header looks like to the parent: fewer frames planned than the codec
    # yields. The clip is refused at the plan; nothing past it is allocated.
    lying = attrs.evolve(_geometry(mp3), frames=1_000, duration_us=62_500)
    with pytest.raises(LimitError) as info:
        decode(mp3, lying, clip_index=1, decoders=pool)
    assert info.value.maximum == 1_000
    assert info.value.clip_index == 1


def test_a_prefix_stops_early_without_refusing(pool, mp3):
    prefix = attrs.evolve(_geometry(mp3), frames=1_000, duration_us=62_500, prefix=True)
    assert decode(mp3, prefix, clip_index=0, decoders=pool).shape == (1_000,)


def test_a_decoder_disagreeing_with_the_header_is_stream_changed(pool, flac):
    wrong = attrs.evolve(_geometry(flac), channels=2)
    with pytest.raises(DecodeError) as info:
        decode(flac, wrong, clip_index=0, decoders=pool)
    assert info.value.code == "stream_changed"


def test_a_lossless_stream_shorter_than_its_header_is_truncated(pool, flac):
    geometry = _geometry(flac)
    longer = attrs.evolve(geometry, frames=20_000, duration_us=1_250_000)
    with pytest.raises(DecodeError) as info:
        decode(flac, longer, clip_index=0, decoders=pool)
    assert info.value.code == "truncated_stream"


def test_cancellation_between_blocks_kills_the_decoder(pool, flac):
    hanging = _pool("hang", cpu_seconds=5)
    token = CancelToken()
    timer = threading.Timer(0.3, token.cancel)
    timer.start()
    try:
        with pytest.raises(PreprocessCancelled):
            decode(flac, _geometry(flac), clip_index=0, cancel=token, decoders=hanging)
        assert hanging.live_processes == 0
    finally:
        timer.cancel()
        hanging.close()


def test_processes_are_reused_and_bounded(pool, flac):
    geometry = _geometry(flac)
    first = decode(flac, geometry, clip_index=0, decoders=pool)
    assert pool.live_processes == 1
    second = decode(flac, geometry, clip_index=0, decoders=pool)
    assert pool.live_processes == 1
    np.testing.assert_array_equal(first, second)


def test_concurrent_clips_share_a_bounded_pool(flac):
    geometry = _geometry(flac)
    shared = DecoderPool(processes=2)
    results: list[int] = []
    try:
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    decode(flac, geometry, clip_index=0, decoders=shared).shape[0]
                )
            )
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [16_000] * 4
        assert shared.live_processes <= 2
    finally:
        shared.close()
    assert shared.live_processes == 0


def test_a_worker_decodes_compressed_clips_in_its_own_pool_and_closes_it(mp3):
    from toyfamily import ToyFamily, toy_policy

    from audiogate import create_host
    from audiogate.pipeline import EncodedClip
    from audiogate.worker import AudioWorker

    host = create_host(load_entry_points=False, plugins=[ToyFamily()])
    worker = AudioWorker(host)
    try:
        clip = EncodedClip(data=mp3, source_format=AUTO, ordinal=1)
        batch = worker.prepare(toy_policy(), [clip], timeout=60)
        assert batch.clips[0].source_rate_hz == 16_000
        assert abs(batch.clips[0].source_samples - 16_000) <= 1_152
        assert worker.decoders.live_processes == 1
    finally:
        worker.close()
    assert worker.decoders.live_processes == 0


def test_a_refused_stream_keeps_its_process(pool):
    # A stream the codec refuses is answered by the process, which then waits for the
    # next clip: replacing it would cost 0.1-0.2 s per broken file sent.
    from pathlib import Path

    corpus = Path(__file__).resolve().parents[1] / "data" / "audio" / "vorbis-mono-16000.ogg"
    broken = bytearray(corpus.read_bytes())
    broken[35] ^= 0xFF  # inside the Vorbis identification header
    geometry = _geometry(bytes(broken))
    decode(corpus.read_bytes(), _geometry(corpus.read_bytes()), clip_index=0, decoders=pool)
    (before,) = [child.process.pid for child in pool._idle]
    with pytest.raises(DecodeError) as info:
        decode(bytes(broken), geometry, clip_index=0, decoders=pool)
    assert info.value.code == "decoder_error"
    assert [child.process.pid for child in pool._idle] == [before]
