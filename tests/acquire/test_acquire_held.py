"""The shared in-flight acquisition budget: files and URLs of all requests together."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from acquire_helpers import WAIT_S, LoopbackServer, audio_url, endless, net_policy, respond, wav

from audiogate.acquire import ACQUIRED_BYTES_LIMIT, AcquiredBytes, AcquisitionPolicy, acquire_parts
from audiogate.acquire import files as files_module
from audiogate.cancel import CancelToken
from audiogate.errors import AcquisitionError, MemoryLimitError, PreprocessCancelled

CLIP = wav(8_000)


def run(scenario):
    return asyncio.run(scenario())


class Recorder:
    """An ``on_change`` that keeps every total it is told."""

    def __init__(self) -> None:
        self.totals: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, held: int) -> None:
        with self._lock:
            self.totals.append(held)


# --- the budget ------------------------------------------------------------------------


def test_take_and_give_track_the_total_and_refuse_what_does_not_fit() -> None:
    seen = Recorder()
    budget = AcquiredBytes(100, on_change=seen)
    budget.take(60)
    with pytest.raises(MemoryLimitError) as caught:
        budget.take(41)
    assert (caught.value.limit, caught.value.actual, caught.value.maximum) == (
        ACQUIRED_BYTES_LIMIT,
        101,
        100,
    )
    budget.take(40)
    budget.give(100)
    assert budget.held == 0
    assert seen.totals == [60, 100, 0]
    with pytest.raises(ValueError, match="maximum"):
        AcquiredBytes(0)


def test_a_request_hold_gives_everything_back_once_and_takes_nothing_after() -> None:
    budget = AcquiredBytes(100)
    hold = budget.hold()
    hold.take(30)
    hold.take(0)
    hold.take(20)
    assert (budget.held, hold.nbytes) == (50, 50)
    hold.release()
    hold.release()
    assert budget.held == 0
    # A reader thread outliving its cancelled request cannot leak bytes.
    hold.take(10)
    assert budget.held == 0


def test_concurrent_holds_never_exceed_the_maximum_and_return_to_zero() -> None:
    seen = Recorder()
    budget = AcquiredBytes(1_000, on_change=seen)
    refused = [0]
    lock = threading.Lock()

    start = threading.Barrier(8)
    holding = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        for round_ in range(50):
            hold = budget.hold()
            try:
                hold.take(300)
                hold.take(200)
            except MemoryLimitError:
                with lock:
                    refused[0] += 1
            finally:
                if round_ == 0:
                    holding.wait()  # all eight have tried while the first holds stand
                hold.release()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.held == 0
    assert max(seen.totals) <= 1_000
    assert refused[0] >= 6  # in the first round at most two of eight fit


# --- files -----------------------------------------------------------------------------


@pytest.fixture
def media(tmp_path: Path) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    (root / "a.wav").write_bytes(CLIP)
    return root


def _file_policy(media: Path, budget: AcquiredBytes) -> AcquisitionPolicy:
    return AcquisitionPolicy(media_root=media, shared_bytes=budget)


def test_a_file_is_held_while_read_and_released_when_acquisition_returns(media) -> None:
    seen = Recorder()
    budget = AcquiredBytes(10 * len(CLIP), on_change=seen)
    clips = run(lambda: acquire_parts([audio_url("a.wav")] * 2, policy=_file_policy(media, budget)))
    assert [len(c.data) for c in clips] == [len(CLIP)] * 2
    assert seen.totals == [len(CLIP), 2 * len(CLIP), 0]
    assert budget.held == 0


def test_a_file_over_the_shared_budget_is_refused_before_it_is_read(media, monkeypatch) -> None:
    reads = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(files_module.os, "read", counting_read)
    budget = AcquiredBytes(len(CLIP) + 10)
    budget.take(20)  # another request holds a little
    with pytest.raises(MemoryLimitError) as caught:
        run(lambda: acquire_parts([audio_url("a.wav")], policy=_file_policy(media, budget)))
    assert (caught.value.limit, caught.value.clip_index) == (ACQUIRED_BYTES_LIMIT, 0)
    assert caught.value.actual == len(CLIP) + 20
    assert reads == []
    assert budget.held == 20


def test_a_refused_second_clip_gives_back_the_first_clips_bytes(media) -> None:
    budget = AcquiredBytes(len(CLIP) + len(CLIP) // 2)
    with pytest.raises(MemoryLimitError) as caught:
        run(lambda: acquire_parts([audio_url("a.wav")] * 2, policy=_file_policy(media, budget)))
    assert caught.value.clip_index == 1
    assert budget.held == 0


def test_a_cancelled_acquisition_gives_its_bytes_back(media) -> None:
    token = CancelToken()
    token.cancel()
    budget = AcquiredBytes(10 * len(CLIP))
    with pytest.raises(PreprocessCancelled):
        run(
            lambda: acquire_parts(
                [audio_url("a.wav")], policy=_file_policy(media, budget), cancel=token
            )
        )
    assert budget.held == 0


def test_concurrent_requests_share_the_budget(media) -> None:
    seen = Recorder()
    budget = AcquiredBytes(2 * len(CLIP), on_change=seen)
    policy = _file_policy(media, budget)

    async def scenario() -> list[object]:
        return await asyncio.gather(
            *(acquire_parts([audio_url("a.wav")] * 2, policy=policy) for _ in range(6)),
            return_exceptions=True,
        )

    outcomes = run(scenario)
    assert all(
        isinstance(o, list) or (isinstance(o, MemoryLimitError) and o.limit == ACQUIRED_BYTES_LIMIT)
        for o in outcomes
    ), outcomes
    assert max(seen.totals) <= 2 * len(CLIP)
    assert budget.held == 0
    # Refusals are transient: with the others gone, a request fits again.
    assert len(run(lambda: acquire_parts([audio_url("a.wav")] * 2, policy=policy))) == 2


# --- URLs ------------------------------------------------------------------------------


def test_a_content_length_is_held_before_the_body_and_released_after() -> None:
    seen = Recorder()
    budget = AcquiredBytes(10 * len(CLIP), on_change=seen)

    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            clips = await acquire_parts([audio_url(url)], policy=net_policy(shared_bytes=budget))
            assert clips[0].data == CLIP

    run(scenario)
    assert seen.totals == [len(CLIP), 0]


@pytest.mark.parametrize("framing", ["chunked", "close-delimited"])
def test_a_stream_without_a_length_is_held_chunk_by_chunk_and_cut_off(framing) -> None:
    cap = 300_000
    seen = Recorder()
    budget = AcquiredBytes(cap, on_change=seen)

    async def scenario():
        async with LoopbackServer() as server:
            handler = (
                endless()
                if framing == "chunked"
                else respond(b"\0" * (4 * cap), content_length=None)
            )
            url = server.route("/big", handler)
            with pytest.raises(MemoryLimitError) as caught:
                await acquire_parts([audio_url(url)], policy=net_policy(shared_bytes=budget))
            assert caught.value.limit == ACQUIRED_BYTES_LIMIT
            ex = server.exchanges[0]
            await asyncio.wait_for(ex.closed.wait(), WAIT_S)

    run(scenario)
    assert max(seen.totals) <= cap
    assert budget.held == 0


def test_inline_audio_is_not_counted_again() -> None:
    # Its bytes arrived in the request body, which the server's body budget counts.
    from acquire_helpers import b64, input_audio

    budget = AcquiredBytes(1)
    clips = run(
        lambda: acquire_parts(
            [input_audio(b64(CLIP))], policy=AcquisitionPolicy(shared_bytes=budget)
        )
    )
    assert clips[0].data == CLIP
    with pytest.raises(AcquisitionError):
        run(
            lambda: acquire_parts(
                [input_audio("@@")], policy=AcquisitionPolicy(shared_bytes=budget)
            )
        )
    assert budget.held == 0
