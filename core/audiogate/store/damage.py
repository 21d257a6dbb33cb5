""":class:`StoreDamagedError`: a store's index cannot be read; opening refuses rather
than guess (an empty index would orphan every blob)."""

from __future__ import annotations

from pathlib import Path

from audiogate.errors import AudioGateError

__all__ = ["StoreDamagedError"]


class StoreDamagedError(AudioGateError):
    """The store's index ``path`` is damaged: a one-line message names it and the repair
    command (``audiogate sources repair --store DIR``), which rebuilds the index from the
    blobs' manifests and quarantines what it cannot account for (docs/sources.md)."""

    code = "store_damaged"

    def __init__(self, path: str | Path, detail: str, *, store: str | Path | None = None) -> None:
        self.path = Path(path)
        self.detail = " ".join(str(detail).split())
        where = self.path.parent if store is None else Path(store)
        super().__init__(
            f"source store index {self.path} is damaged ({self.detail}); nothing was changed: "
            f"run `audiogate sources repair --store {where}` to rebuild it from the blobs"
        )
