"""interrupt_on_stop_signals and wait_for_a_stop_signal: a SIGINT or SIGTERM is acted on
even where Python drops the interrupt it raises, and the handlers are restored."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from audiogate.server import stop_signals
from audiogate.server.stop_signals import interrupt_on_stop_signals, wait_for_a_stop_signal


@pytest.fixture(autouse=True)
def python_handlers() -> Iterator[None]:
    """SIGINT with Python's own handler and SIGTERM's default, as in a fresh process."""
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    }
    yield
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def ours(sig: signal.Signals) -> bool:
    """The context's handler is in place (else the signal would end the test run)."""
    return signal.getsignal(sig) not in (signal.SIG_DFL, signal.default_int_handler)


class Finaliser:
    """Raises ``sig`` in its ``__del__``, where Python drops the interrupt that follows."""

    def __init__(self, sig: signal.Signals) -> None:
        self.sig = sig

    def __del__(self) -> None:
        assert ours(self.sig)
        signal.raise_signal(self.sig)


@pytest.fixture
def dropped(monkeypatch) -> list[type[BaseException]]:
    """What Python dropped ("Exception ignored"), by type."""
    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_type))
    return seen


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_interrupts_the_body(sig) -> None:
    reached = []

    def body() -> None:
        with interrupt_on_stop_signals() as stop:
            assert ours(sig)
            signal.raise_signal(sig)
            reached.append("after")
        assert stop.came

    with pytest.raises(KeyboardInterrupt):
        body()
    assert reached == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_dropped_interrupt_is_raised_again_when_the_body_is_done(sig, dropped) -> None:
    finished = []

    def body() -> None:
        with interrupt_on_stop_signals() as stop:
            Finaliser(sig)  # dropped at once: its interrupt is "ignored"
            finished.append(stop.came)

    with pytest.raises(KeyboardInterrupt):
        body()
    assert finished == [True]
    assert dropped == [KeyboardInterrupt]


def test_without_a_signal_nothing_is_raised() -> None:
    with interrupt_on_stop_signals() as stop:
        pass
    assert not stop.came


def test_an_ignored_sigint_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with interrupt_on_stop_signals() as stop:
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)
    assert not stop.came
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_wait_returns_on_a_signal_from_elsewhere(sig) -> None:
    def send() -> None:
        deadline = time.monotonic() + 30
        while not ours(sig) and time.monotonic() < deadline:
            time.sleep(0.005)
        if ours(sig):
            os.kill(os.getpid(), sig)

    sender = threading.Thread(target=send)
    sender.start()
    wait_for_a_stop_signal(poll_s=0.05)
    sender.join()


def test_the_wait_returns_on_a_dropped_interrupt(monkeypatch, dropped) -> None:
    sleeps = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 1:
            Finaliser(signal.SIGTERM)
        assert len(sleeps) < 100, "the wait did not notice the signal"

    monkeypatch.setattr(stop_signals, "sleep", sleep)
    wait_for_a_stop_signal(poll_s=0.01)
    assert sleeps == [0.01]
    assert dropped == [KeyboardInterrupt]
