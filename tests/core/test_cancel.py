"""CancelToken: checkpoints, on_cancel callbacks, the NEVER token and linked tokens."""

from __future__ import annotations

import threading

import pytest

from audiogate.acquire.context import LinkedToken
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import PreprocessCancelled


def test_check_raises_with_the_checkpoint_and_clip_once_cancelled() -> None:
    token = CancelToken()
    token.check(Checkpoint.DECODE, 1)
    token.cancel()
    with pytest.raises(PreprocessCancelled) as caught:
        token.check(Checkpoint.DECODE, 1)
    assert (caught.value.checkpoint, caught.value.clip_index) == ("Decode", 1)


def test_callbacks_run_once_on_cancel_and_at_once_when_already_cancelled() -> None:
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: calls.append("a"))
    forget = token.on_cancel(lambda: calls.append("b"))
    forget()
    forget()  # idempotent
    assert calls == []
    token.cancel()
    token.cancel()
    assert calls == ["a"]
    token.on_cancel(lambda: calls.append("late"))
    assert calls == ["a", "late"]


def test_a_callback_may_take_locks_the_canceller_does_not_hold() -> None:
    # Callbacks run with no lock of the token held: one may register another callback.
    token = CancelToken()
    calls: list[str] = []
    token.on_cancel(lambda: token.on_cancel(lambda: calls.append("nested")))
    token.cancel()
    assert calls == ["nested"]


def _register_and_cancel(token: CancelToken, counts: list[int]) -> None:
    lock = threading.Lock()

    def bump(i: int) -> None:
        with lock:
            counts[i] += 1

    def register(i: int) -> None:
        token.on_cancel(lambda: bump(i))

    threads = [threading.Thread(target=register, args=(i,)) for i in range(len(counts))]
    half = len(threads) // 2
    for thread in threads[:half]:
        thread.start()
    token.cancel()
    for thread in threads[half:]:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_registration_and_cancel_run_every_callback_exactly_once() -> None:
    for _ in range(50):
        counts = [0] * 64
        _register_and_cancel(CancelToken(), counts)
        assert counts == [1] * 64


def test_never_keeps_no_callbacks() -> None:
    forget = NEVER.on_cancel(lambda: pytest.fail("NEVER is never cancelled"))
    forget()
    assert not NEVER._CancelToken__callbacks  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        NEVER.cancel()


def test_a_subclass_may_cancel_while_holding_a_lock_of_its_own_named_lock() -> None:
    class Counting(CancelToken):
        def __init__(self) -> None:
            super().__init__()
            self._lock = threading.Lock()

        def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
            with self._lock:
                self.cancel()
            super().check(checkpoint, clip_index)

    token = Counting()
    calls: list[int] = []
    token.on_cancel(lambda: calls.append(1))
    with pytest.raises(PreprocessCancelled):
        token.check(Checkpoint.QUEUE)
    assert calls == [1]


@pytest.mark.parametrize("which", ["own", "parent", "both"])
def test_a_linked_token_calls_back_once_whichever_is_cancelled(which: str) -> None:
    parent = CancelToken()
    linked = LinkedToken(parent)
    calls: list[int] = []
    linked.on_cancel(lambda: calls.append(1))
    if which in ("own", "both"):
        linked.cancel()
    if which in ("parent", "both"):
        parent.cancel()
    assert calls == [1]
    assert linked.cancelled


def test_a_forgotten_linked_callback_stays_silent() -> None:
    parent = CancelToken()
    linked = LinkedToken(parent)
    forget = linked.on_cancel(lambda: pytest.fail("forgotten"))
    forget()
    parent.cancel()
    linked.cancel()
