"""Record vLLM's render answers for audiogate's fixed request set.

Runs vLLM's GPU-less render server (``vllm.entrypoints.launchers.render.entry``) from the
environment ``setup_env.sh`` made, on each bundled checkpoint, sends every request of
:data:`audiogate.vllm.fixtures.RENDER_REQUESTS` and writes
``tests/data/vllm/<family>.json``: per request its status and answer, with each
``kwargs_data`` item stored as base64 of its zlib-compressed msgpack (bit-exact, a
fraction of the size).

    scripts/vllm/setup_env.sh /work/vllm-env
    .venv/bin/python scripts/vllm/record_fixtures.py --vllm-env /work/vllm-env
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "core"))

from audiogate.vllm.fixtures import RENDER_REQUESTS, request_body  # noqa: E402

MODELS = {
    "qwen2audio": ROOT / "examples" / "models" / "qwen2-audio-7b-instruct",
    "gemma3n": ROOT / "examples" / "models" / "gemma-3n-e4b-it",
    "qwen25omni": ROOT / "examples" / "models" / "qwen2.5-omni-7b",
    "qwen3omni": ROOT / "examples" / "models" / "qwen3-omni-30b-a3b-instruct",
    "voxtral": ROOT / "examples" / "models" / "voxtral-mini-3b-2507",
    "audioflamingo3": ROOT / "examples" / "models" / "audio-flamingo-3-hf",
    "glmasr": ROOT / "examples" / "models" / "glm-asr-nano-2512",
    "granitespeech": ROOT / "examples" / "models" / "granite-speech-3.3-2b",
}
#: Arguments a family's checkpoint needs on vLLM's command line.
EXTRA_ARGS = {"voxtral": ["--tokenizer-mode", "mistral"]}
#: vLLM's Omni thinkers import transformers' Qwen2-VL image and video processors, which
#: import torchvision, and no torchvision build loads against the CPU torch. These
#: families run with a stand-in of torchvision's import surface on the path: an audio
#: render never calls into it (each of its functions raises if called).
TORCHVISION_STAND_IN = Path(__file__).resolve().parent / "torchvision_stand_in"
NEEDS_STAND_IN = frozenset({"qwen25omni", "qwen3omni"})
OUT = ROOT / "tests" / "data" / "vllm"
RENDER_PATH = "/v1/chat/completions/render"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _wait_ready(base: str, process: subprocess.Popen[bytes], timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM's render server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2):
                return time.monotonic() - started
        except (urllib.error.URLError, OSError):
            time.sleep(1.0)
    raise TimeoutError(f"vLLM's render server did not start in {timeout_s:.0f} s")


def _compact(answer: Any) -> Any:
    features = answer.get("features") if isinstance(answer, dict) else None
    if features and features.get("kwargs_data"):
        for modality, items in features["kwargs_data"].items():
            features["kwargs_data"][modality] = [
                None
                if item is None
                else {
                    "zlib_base64": base64.b64encode(
                        zlib.compress(base64.b64decode(item), 9)
                    ).decode("ascii"),
                    "base64_chars": len(item),
                }
                for item in items
            ]
    return answer


def record(family: str, vllm_python: Path, log_dir: Path) -> dict[str, Any]:
    model_dir = MODELS[family]
    served = model_dir.name
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if family in NEEDS_STAND_IN:
        path = os.pathsep.join(filter(None, [str(TORCHVISION_STAND_IN), env.get("PYTHONPATH")]))
        env["PYTHONPATH"] = path
    command = [
        str(vllm_python),
        "-m",
        "vllm.entrypoints.launchers.render.entry",
        "--model",
        str(model_dir),
        "--served-model-name",
        served,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *EXTRA_ARGS.get(family, []),
    ]
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"render-{family}.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            startup_s = _wait_ready(base, process, 900)
            answers: dict[str, Any] = {}
            for case in RENDER_REQUESTS:
                if family not in case.families:
                    continue
                status, answer = _post(base + RENDER_PATH, request_body(case, served))
                answers[case.name] = {"status": status, "answer": _compact(answer)}
                print(f"{family} {case.name}: {status}", flush=True)
            version = subprocess.run(
                [str(vllm_python), "-c", "import vllm; print(vllm.__version__)"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout.strip()
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return {
        "vllm_version": version,
        "family": family,
        "model_dir": str(model_dir.relative_to(ROOT)),
        "served_model_name": served,
        "startup_s": round(startup_s, 1),
        # The day the chat templates' strftime_now saw (Granite's names it in the system
        # prompt): the fixture tests render on it (tests/vllm/test_vllm_fixtures.py).
        "recorded_on": time.strftime("%Y-%m-%d"),
        "requests": answers,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vllm-env", type=Path, default=ROOT.parent / "vllm-env")
    parser.add_argument("--family", action="append", choices=sorted(MODELS))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/audiogate-vllm-logs"))
    args = parser.parse_args(argv)
    python = args.vllm_env / "bin" / "python"
    if not python.exists():
        parser.error(f"no vLLM environment at {args.vllm_env}; run scripts/vllm/setup_env.sh")
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for family in args.family or sorted(MODELS):
        try:
            recorded = record(family, python, args.logs)
        except (RuntimeError, TimeoutError) as error:
            # One family vLLM cannot load must not stop the others: its log says why.
            print(f"{family}: {error} (see {args.logs / f'render-{family}.log'})", flush=True)
            failed.append(family)
            continue
        path = args.out / f"{family}.json"
        path.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
