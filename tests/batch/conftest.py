"""Batch test fixtures (helpers live in :mod:`batchkit`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from batchkit import write_manifest


@pytest.fixture
def manifest(tmp_path: Path) -> tuple[Path, Path]:
    """``(manifest.jsonl, media root)`` of :func:`batchkit.write_manifest`."""
    return write_manifest(tmp_path)
