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
from shipped import ShippedFamily, shipped_families

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tiny-model tests rely on the models' own placeholder-count checks.
os.environ.pop("TRANSFORMERS_DISABLE_TORCH_CHECK", None)

_SHIPPED = shipped_families()
_ROOT = Path(__file__).resolve().parent
_EXAMPLES = _ROOT / "examples" / "models"


def _model_type(family: ShippedFamily) -> str | None:
    """The ``model_type`` of the family's first bundled example directory."""
    for example in family.examples:
        config = _EXAMPLES / example / "config.json"
        if config.is_file():
            return str(json.loads(config.read_text("utf-8"))["model_type"])
    return None


#: family → the model_type its example checkpoint declares (``model_dir``'s default).
MODEL_TYPES = {
    family.name: model_type
    for family in _SHIPPED
    if (model_type := _model_type(family)) is not None
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip ``plugins/<dir>`` unless families.toml lists it or the command line names it
    (a family's folder is collected from the moment its line is added)."""
    if collection_path.parent != _ROOT / "plugins" or not collection_path.is_dir():
        return None
    if collection_path.name in {family.dir for family in _SHIPPED}:
        return None
    for arg in config.invocation_params.args:
        named = (config.invocation_params.dir / str(arg).partition("::")[0]).resolve()
        if named == collection_path or collection_path in named.parents:
            return None
    return True


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
