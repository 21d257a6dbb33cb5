"""Cancellation tokens for tests: count the polls, cancel on the n-th one."""

from __future__ import annotations

from audiogate.cancel import CancelToken, Checkpoint

__all__ = ["CancelAt"]


class CancelAt(CancelToken):
    """A token that records every poll and cancels itself on the ``nth`` poll of ``checkpoint``.

    With ``checkpoint=None`` it never cancels and only counts, which tells how often a
    stage polls for a given clip.

    :param checkpoint: the checkpoint whose polls are counted towards ``nth``.
    :param nth: the one-based poll of ``checkpoint`` that cancels (and therefore raises).
    """

    def __init__(self, checkpoint: Checkpoint | None = None, nth: int = 1) -> None:
        super().__init__()
        if nth < 1:
            raise ValueError(f"nth must be at least 1, got {nth}")
        self.checkpoint = checkpoint
        self.nth = nth
        #: ``(checkpoint, clip_index)`` of every poll, in order.
        self.polls: list[tuple[Checkpoint, int | None]] = []

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        """Record the poll, cancel on the ``nth`` poll of the watched checkpoint, then check."""
        self.polls.append((checkpoint, clip_index))
        if checkpoint == self.checkpoint and self.count(checkpoint) >= self.nth:
            self.cancel()
        super().check(checkpoint, clip_index)

    def count(self, checkpoint: Checkpoint, clip_index: int | str | None = "any") -> int:
        """Polls of ``checkpoint`` so far (for one ``clip_index``, unless ``"any"``)."""
        return sum(
            1
            for cp, index in self.polls
            if cp == checkpoint and (clip_index == "any" or index == clip_index)
        )
