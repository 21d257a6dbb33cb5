"""``audiogate.dsp.blocks.run_blocks``: every block once, one poll per block, errors surfaced.

The frontends rely on three properties: each block runs exactly once (on whichever
thread), the cancel token sees exactly the polls of a plain loop (one per block, none
after the one that raised), and a failure in any thread reaches the caller only after
every running block has finished.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import audiogate.dsp.blocks
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.blocks import BLOCK_THREADS, block_threads, run_blocks
from audiogate.errors import PreprocessCancelled


class CountingToken(CancelToken):
    """Counts its polls and cancels itself on the ``nth`` (never, if ``nth`` is 0)."""

    def __init__(self, nth: int = 0) -> None:
        super().__init__()
        self.nth = nth
        self.polls: list[tuple[Checkpoint, int | None]] = []
        self._lock = threading.Lock()

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        with self._lock:
            self.polls.append((checkpoint, clip_index))
            if len(self.polls) == self.nth:
                self.cancel()
        super().check(checkpoint, clip_index)


def test_every_block_runs_once_after_one_poll() -> None:
    token = CountingToken()
    done: list[int] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        time.sleep(0.001)
        with lock:
            done.append(index)

    run_blocks(25, work, cancel=token, checkpoint=Checkpoint.FEATURE, clip_index=3)
    assert sorted(done) == list(range(25))
    assert token.polls == [(Checkpoint.FEATURE, 3)] * 25


def test_no_blocks_and_one_block_stay_on_the_calling_thread() -> None:
    threads: list[int] = []
    run_blocks(0, threads.append, cancel=NEVER, checkpoint=Checkpoint.FEATURE, clip_index=0)
    assert threads == []
    run_blocks(
        1,
        lambda _: threads.append(threading.get_ident()),
        cancel=NEVER,
        checkpoint=Checkpoint.RESAMPLE,
        clip_index=0,
    )
    assert threads == [threading.get_ident()]
    assert block_threads(0) == block_threads(1) == 1
    assert block_threads(1000) == BLOCK_THREADS


@pytest.mark.skipif(BLOCK_THREADS < 2, reason="one usable CPU: no helper threads")
def test_a_second_thread_takes_blocks() -> None:
    caller = threading.get_ident()
    helped = threading.Event()

    def work(index: int) -> None:
        if threading.get_ident() != caller:
            helped.set()
        elif index == 0:
            # Hold the caller on its first block until a helper has taken one.
            assert helped.wait(timeout=30)

    run_blocks(4, work, cancel=NEVER, checkpoint=Checkpoint.FEATURE, clip_index=0)
    assert helped.is_set()


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_cancellation_stops_at_the_poll_that_raised(nth: int) -> None:
    token = CountingToken(nth)
    done: list[int] = []

    def work(index: int) -> None:
        time.sleep(0.002)
        done.append(index)

    with pytest.raises(PreprocessCancelled) as info:
        run_blocks(40, work, cancel=token, checkpoint=Checkpoint.RESAMPLE, clip_index=7)
    assert (info.value.checkpoint, info.value.clip_index) == ("Resample", 7)
    # Polls are serialized and none follows the one that raised: the blocks run are
    # exactly those whose poll passed, and all of them finished before the raise.
    assert len(token.polls) == nth
    assert sorted(done) == list(range(nth - 1))


def test_an_error_in_any_block_reaches_the_caller_after_the_running_blocks() -> None:
    running = 0
    lock = threading.Lock()
    started: list[int] = []

    def work(index: int) -> None:
        nonlocal running
        with lock:
            running += 1
            started.append(index)
        try:
            time.sleep(0.002)
            if index == 3:
                raise ValueError("block 3 failed")
        finally:
            with lock:
                running -= 1

    with pytest.raises(ValueError, match="block 3 failed"):
        run_blocks(40, work, cancel=NEVER, checkpoint=Checkpoint.FEATURE, clip_index=0)
    assert running == 0
    # Once a block fails, no new block starts (a running one may still have begun).
    assert len(started) <= 4 + 2 * BLOCK_THREADS


def test_blocks_run_in_a_busy_pool_without_waiting_for_it() -> None:
    """A clip whose helpers cannot start (the pool is busy) finishes on its own thread."""
    if BLOCK_THREADS < 2:
        pytest.skip("one usable CPU: no helper threads")
    release = threading.Event()
    blockers = [
        audiogate.dsp.blocks._pool().submit(release.wait, 30) for _ in range(BLOCK_THREADS - 1)
    ]
    try:
        threads: set[int] = set()
        run_blocks(
            8,
            lambda _: threads.add(threading.get_ident()),
            cancel=NEVER,
            checkpoint=Checkpoint.FEATURE,
            clip_index=0,
        )
        assert threads == {threading.get_ident()}
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()


def test_one_block_thread_keeps_every_block_on_the_calling_thread(monkeypatch) -> None:
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", audiogate.dsp.blocks.BLOCK_THREADS)
    audiogate.dsp.blocks.set_block_threads(1)
    assert block_threads(1000) == 1
    threads: set[int] = set()
    run_blocks(
        40,
        lambda _: threads.add(threading.get_ident()),
        cancel=NEVER,
        checkpoint=Checkpoint.FEATURE,
        clip_index=0,
    )
    assert threads == {threading.get_ident()}
    audiogate.dsp.blocks.set_block_threads(50)  # capped
    assert audiogate.dsp.blocks.BLOCK_THREADS == audiogate.dsp.blocks.MAX_BLOCK_THREADS


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True, None])
def test_block_threads_must_be_a_positive_integer(value) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        audiogate.dsp.blocks.set_block_threads(value)


@pytest.mark.parametrize(
    ("text", "want"),
    [("1", "1"), (" 2 ", "2"), ("64", "2"), ("", None), ("0", "ValueError"), ("two", "ValueError")],
)
def test_the_environment_sets_the_block_threads_at_import(text, want) -> None:
    env = {**os.environ, "AUDIOGATE_BLOCK_THREADS": text}
    code = "import audiogate.dsp.blocks as b; print(b.BLOCK_THREADS)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    if want == "ValueError":
        assert done.returncode != 0
        assert "AUDIOGATE_BLOCK_THREADS must be a positive integer" in done.stderr
    elif want is None:  # unset or blank: the usable CPUs, at most two
        expected = min(audiogate.dsp.blocks.MAX_BLOCK_THREADS, audiogate.dsp.blocks.usable_cpus())
        assert done.stdout.strip() == str(expected)
    else:
        assert done.stdout.strip() == want
