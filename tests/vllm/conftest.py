"""Fixtures of the vLLM tests: an app per family with its render endpoints, and the
``vllm_live`` marker (the live comparison, skipped unless vLLM's environment exists)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from audiogate import AudioGate
from audiogate.host import create_host
from audiogate.server.app import ServerWorker, create_app

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
#: family → the bundled checkpoint it is compared on.
MODEL_DIRS = {
    "qwen2audio": MODELS / "qwen2-audio-7b-instruct",
    "gemma3n": MODELS / "gemma-3n-e4b-it",
}
CHAT_RENDER = "/v1/chat/completions/render"
COMPLETION_RENDER = "/v1/completions/render"


def vllm_env() -> Path:
    """Where ``scripts/vllm/setup_env.sh`` puts vLLM's environment."""
    return Path(os.environ.get("AUDIOGATE_VLLM_ENV", ROOT.parent / "vllm-env"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm_live: runs vLLM's own render server (needs scripts/vllm/setup_env.sh's environment)",
    )


class RenderApp:
    """One family's app and its gate, served in process."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.model_dir = MODEL_DIRS[family]
        self.served = self.model_dir.name
        host = create_host()
        self.gate = AudioGate.from_model_dir(self.model_dir, host=host, worker=ServerWorker(host))
        self.client = TestClient(create_app(self.gate, served_model=self.served))

    def render(self, body: dict[str, Any], path: str = CHAT_RENDER) -> Any:
        return self.client.post(path, json=body)


@pytest.fixture(scope="module", params=sorted(MODEL_DIRS))
def app(request: pytest.FixtureRequest) -> Iterator[RenderApp]:
    """Each family's app, started once per module."""
    served = RenderApp(request.param)
    with served.client:
        yield served
