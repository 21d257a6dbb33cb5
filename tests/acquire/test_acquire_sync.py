"""acquire_parts_sync, the blocking twin: the same clips and the same errors as
acquire_parts, read in the calling thread with no event loop (a URL part on one of its
own, after every part passed its checks)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from acquire_helpers import audio_url, b64, input_audio, wav

from audiogate.acquire import AcquisitionPolicy, acquire_parts, acquire_parts_sync
from audiogate.cancel import CancelToken
from audiogate.errors import AcquisitionError, LimitError, PreprocessCancelled


def _both(parts, policy, **kwargs):
    """``(sync result or error, async result or error)``, as comparable values."""

    def outcome(call):
        try:
            return [(c.ordinal, c.origin, c.data, c.source_format) for c in call()]
        except Exception as exc:
            return (type(exc), str(exc))

    sync = outcome(lambda: acquire_parts_sync(parts, policy=policy, **kwargs))
    asynchronous = outcome(lambda: asyncio.run(acquire_parts(parts, policy=policy, **kwargs)))
    return sync, asynchronous


@pytest.fixture
def media(tmp_path):
    (tmp_path / "a.wav").write_bytes(wav(800))
    (tmp_path / "empty.wav").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    "parts",
    [
        [input_audio(b64(wav(800))), audio_url("data:audio/wav;base64," + b64(wav(1200)))],
        [audio_url("a.wav"), audio_url("file://a.wav")],
        [input_audio("@@")],
        [audio_url("empty.wav")],
        [audio_url("../a.wav")],
        [audio_url("missing.wav")],
        [audio_url("https://example.com/a.wav")],  # refused: fetching is off
        [input_audio(b64(wav(800)))] * 3,  # over max_clips
        [input_audio(b64(wav(40_000)))],  # over max_bytes_per_clip
        [{"type": "audio_ref", "audio_ref": {"sha256": "0" * 64}}],  # no store
    ],
    ids=[
        "inline",
        "files",
        "bad base64",
        "empty file",
        "escape",
        "missing",
        "url off",
        "clip count",
        "clip bytes",
        "reference without store",
    ],
)
def test_the_twin_gives_what_the_async_form_gives(media, parts) -> None:
    policy = AcquisitionPolicy(media_root=media, max_clips=2, max_bytes_per_clip=40_000)
    sync, asynchronous = _both(parts, policy)
    assert sync == asynchronous


def test_the_twin_reads_in_the_calling_thread_without_a_loop(media, monkeypatch) -> None:
    loops: list[object] = []
    new_loop = asyncio.events.new_event_loop
    monkeypatch.setattr(asyncio.events, "new_event_loop", lambda: loops.append(1) or new_loop())
    before = threading.active_count()
    clips = acquire_parts_sync(
        [audio_url("a.wav"), input_audio(b64(wav(800)))],
        policy=AcquisitionPolicy(media_root=media),
    )
    assert [c.ordinal for c in clips] == [1, 2]
    assert loops == []
    assert threading.active_count() == before


def test_a_cancelled_token_reads_nothing(media) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled):
        acquire_parts_sync(
            [audio_url("a.wav")], policy=AcquisitionPolicy(media_root=media), cancel=token
        )


def test_the_shared_acquired_bytes_are_released_after_an_error(media) -> None:
    from audiogate.acquire import AcquiredBytes

    shared = AcquiredBytes(1 << 20)
    policy = AcquisitionPolicy(media_root=media, shared_bytes=shared)
    acquire_parts_sync([audio_url("a.wav")], policy=policy)
    with pytest.raises((AcquisitionError, LimitError)):
        acquire_parts_sync([audio_url("a.wav"), audio_url("missing.wav")], policy=policy)
    assert shared.held == 0
