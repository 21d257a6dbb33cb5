"""Fixtures shared by the core tests (``tests/``) and each family's (``plugins/*/tests``).

The family suites override ``host`` with a host holding only their own family, so a broken
plugin fails its own tests and no other family's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tiny-model tests rely on the models' own placeholder-count checks.
os.environ.pop("TRANSFORMERS_DISABLE_TORCH_CHECK", None)

MODEL_TYPES = {"phi4mm": "phi4mm", "gemma3n": "gemma3n", "qwen2audio": "qwen2_audio"}


ModelDirFactory = Callable[..., Path]


@pytest.fixture
def model_dir(tmp_path: Path) -> ModelDirFactory:
    """Write a model directory: ``model_dir("gemma3n", config={...}, preprocessor={...})``."""
    counter = iter(range(1_000_000))

    def make(
        family: str,
        *,
        config: dict[str, Any] | None = None,
        preprocessor: dict[str, Any] | str | None = None,
        processor: dict[str, Any] | str | None = None,
    ) -> Path:
        root = tmp_path / f"{family}-{next(counter)}"
        root.mkdir()
        document = {"model_type": MODEL_TYPES[family]}
        document.update(config or {})
        (root / "config.json").write_text(json.dumps(document))
        for name, content in (
            ("preprocessor_config.json", preprocessor),
            ("processor_config.json", processor),
        ):
            if content is None:
                continue
            text = content if isinstance(content, str) else json.dumps(content)
            (root / name).write_text(text)
        return root

    return make
