"""interrupt_cancels: the first SIGINT cancels the token, a second interrupts at once, and
the handler and the watcher thread are gone on every way out."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.cli.interrupt import interrupt_cancels
from audiogate.errors import PreprocessCancelled


@pytest.fixture(autouse=True)
def python_sigint() -> Iterator[None]:
    """SIGINT with Python's own handler, as on a terminal; restored afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
    # Whatever happened, nothing of the context is left.
    assert not [t for t in threading.enumerate() if t.name == "audiogate-interrupt"]


def ctrl_c() -> None:
    """Raise SIGINT in this process, once the context's handler is in place (Python's own
    would interrupt the test run)."""
    assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    signal.raise_signal(signal.SIGINT)


def cancelled_within(token: CancelToken, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not token.cancelled and time.monotonic() < deadline:
        time.sleep(0.001)
    return token.cancelled


def test_without_a_signal_nothing_changes() -> None:
    with interrupt_cancels() as token:
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert not token.cancelled
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def inside(work: Callable[[CancelToken], object]) -> None:
    """Run ``work(token)`` inside the context."""
    with interrupt_cancels() as token:
        work(token)


def test_the_first_sigint_cancels_the_token_and_the_work_leaves_as_keyboard_interrupt() -> None:
    def work(token: CancelToken) -> None:
        ctrl_c()  # no KeyboardInterrupt here: the work stops at its checkpoint
        assert cancelled_within(token)
        token.check(Checkpoint.FEATURE)

    with pytest.raises(KeyboardInterrupt):
        inside(work)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_work_that_finishes_after_the_signal_still_leaves_as_keyboard_interrupt() -> None:
    finished = []

    def work(token: CancelToken) -> None:
        ctrl_c()
        finished.append(True)  # past its last checkpoint

    with pytest.raises(KeyboardInterrupt):
        inside(work)
    assert finished == [True]


def test_a_second_sigint_interrupts_at_once() -> None:
    reached = []

    def work(token: CancelToken) -> None:
        ctrl_c()
        assert cancelled_within(token)
        ctrl_c()
        reached.append("after the second")

    with pytest.raises(KeyboardInterrupt):
        inside(work)
    assert reached == []


def test_a_cancellation_of_its_own_is_not_an_interrupt() -> None:
    def work(token: CancelToken) -> None:
        token.cancel()
        token.check(Checkpoint.DECODE, 0)

    with pytest.raises(PreprocessCancelled, match="during Decode for clip 1"):
        inside(work)


def test_other_errors_pass_through_and_the_handler_is_restored() -> None:
    def work(token: CancelToken) -> None:
        raise ValueError("not ours")

    with pytest.raises(ValueError, match="not ours"):
        inside(work)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with interrupt_cancels() as token:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
    assert not token.cancelled


def test_outside_the_main_thread_the_token_is_plain() -> None:
    seen = []

    def work() -> None:
        with interrupt_cancels() as token:
            seen.append((token.cancelled, signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [(False, signal.default_int_handler)]
