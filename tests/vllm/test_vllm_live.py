"""The live tier: vLLM's own render server, run now, against audiogate's endpoint.

Opt in with ``-m vllm_live`` after ``scripts/vllm/setup_env.sh`` (the environment is
looked for at ``$AUDIOGATE_VLLM_ENV``, default ``../vllm-env`` beside the checkout);
skipped otherwise. Each family's server takes a minute or two to start on a CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from vllmkit import ROOT, RenderApp, compare_answer, vllm_env

from audiogate.vllm import check_vllm_version
from audiogate.vllm.fixtures import RENDER_REQUESTS

pytestmark = [
    pytest.mark.vllm_live,
    pytest.mark.skipif(
        not (vllm_env() / "bin" / "python").exists(),
        reason="vLLM's environment is not installed (scripts/vllm/setup_env.sh)",
    ),
]


@pytest.fixture(scope="module")
def live(app: RenderApp, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM's answers for ``app``'s family, recorded now."""
    out = tmp_path_factory.mktemp(f"vllm-{app.family}")
    script = ROOT / "scripts" / "vllm" / "record_fixtures.py"
    command = [sys.executable, str(script), "--vllm-env", str(vllm_env())]
    command += ["--family", app.family, "--out", str(out), "--logs", str(out)]
    subprocess.run(command, check=True, timeout=1800)
    recorded: dict[str, Any] = json.loads(Path(out, f"{app.family}.json").read_text())
    check_vllm_version(recorded["vllm_version"])
    return recorded


@pytest.mark.parametrize("case", RENDER_REQUESTS, ids=lambda case: case.name)
def test_render_matches_live_vllm(app: RenderApp, live: dict[str, Any], case: Any) -> None:
    compare_answer(app, case, live["requests"][case.name])


def _audiogate_in_vllm_env() -> bool:
    check = [str(vllm_env() / "bin" / "python"), "-c", "import audiogate_qwen2audio, msgpack"]
    return subprocess.run(check, capture_output=True, check=False).returncode == 0


def test_in_process_generate_gives_vllms_greedy_tokens(tmp_path: Path) -> None:
    # The example prepares with audiogate and generates with vLLM's engine in one
    # process; it needs audiogate installed in vLLM's environment too
    # (pip install --no-deps -e . -e plugins/qwen2audio there, and msgpack).
    if not _audiogate_in_vllm_env():
        pytest.skip("audiogate is not installed in vLLM's environment")
    example = ROOT / "examples" / "vllm" / "generate_in_process.py"
    command = [str(vllm_env() / "bin" / "python"), str(example), "--keep", str(tmp_path)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "identical to vLLM's own: True" in done.stdout
    assert "same: True" in done.stdout


def test_generate_round_trip_gives_vllms_greedy_tokens(tmp_path: Path) -> None:
    # vLLM's generate service (--tokens-only) on a tiny random Qwen2-Audio, fed
    # audiogate's render answer over HTTP as it is, and vLLM's own render answer: the
    # same prompt ids, placeholders and greedy tokens.
    script = ROOT / "scripts" / "vllm" / "generate_round_trip.py"
    command = [sys.executable, str(script), "--vllm-env", str(vllm_env()), "--keep", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["same_prompt"]
    assert summary["same_placeholders"]
    assert summary["same_tokens"]
