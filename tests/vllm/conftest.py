"""Fixtures of the vLLM tests: an app per family with its render endpoints, and the
``vllm_live`` marker (the live comparison, skipped unless vLLM's environment exists)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from vllmkit import MODEL_DIRS, RenderApp


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm_live: runs vLLM's own render server (opt in: -m vllm_live or "
        "AUDIOGATE_VLLM_LIVE=1; needs scripts/vllm/setup_env.sh's environment)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Opt-in: minutes of vLLM start-up per family are not for every run.
    if "vllm_live" in (config.getoption("-m") or "") or os.environ.get("AUDIOGATE_VLLM_LIVE"):
        return
    skip = pytest.mark.skip(reason="live vLLM tier: opt in with -m vllm_live")
    for item in items:
        if item.get_closest_marker("vllm_live") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module", params=sorted(MODEL_DIRS))
def app(request: pytest.FixtureRequest) -> Iterator[RenderApp]:
    """Each family's app, started once per module."""
    served = RenderApp(request.param)
    with served.client:
        yield served
