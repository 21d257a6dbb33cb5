"""Code written against audiogate 0.1.0 keeps importing: every public name, same path.

``public_api_0.1.0.json`` lists the ``__all__`` of each module of the plugin API
(``audiogate``, ``audiogate.family``, ``audiogate.records``, ``audiogate.testing``) and of
the modules servers import (``api``, ``worker``, ``metrics``, ``errors``...) as 0.1.0
shipped them. A name may move (its old path then forwards with a deprecation warning,
``CHANGELOG.md``), but none may disappear before the version the changelog names.
"""

from __future__ import annotations

import importlib
import json
import warnings
from pathlib import Path

import pytest

from audiogate.deprecation import AudioGateDeprecationWarning

API_0_1_0: dict[str, list[str]] = json.loads(
    (Path(__file__).with_name("public_api_0.1.0.json")).read_text("utf-8")
)


@pytest.mark.parametrize("module", sorted(API_0_1_0))
def test_every_0_1_0_public_name_still_imports_from_its_path(module: str) -> None:
    with warnings.catch_warnings():
        # A moved name may warn; it must still resolve.
        warnings.simplefilter("ignore", AudioGateDeprecationWarning)
        imported = importlib.import_module(module)
        missing = [name for name in API_0_1_0[module] if not hasattr(imported, name)]
    assert missing == [], f"{module} lost {missing}"


def test_the_list_covers_the_plugin_api() -> None:
    for module in ("audiogate", "audiogate.family", "audiogate.records", "audiogate.testing"):
        assert module in API_0_1_0
    assert "hookimpl" in API_0_1_0["audiogate"]
