"""One ``/inference/v1/generate`` round trip: audiogate's render answer against vLLM's.

Builds a tiny random-weight Qwen2-Audio from the bundled checkpoint's config (in vLLM's
environment, with ``examples/vllm/generate_in_process.py``'s builder; no weights are
downloaded), starts vLLM's server on it with the scale-out endpoints
(``--enable-scale-out``: its render and its token-in ``/inference/v1/generate``; vLLM
0.32's ``--tokens-only`` cannot serve Qwen2-Audio, whose multimodal processor needs the
tokenizer that mode skips), and sends one chat request (a 5 s 16 kHz clip and a
question, greedy, 8 tokens) through both renderers: vLLM's render answer and
audiogate's (its ``/v1/chat/completions/render``, in process) are each posted as they
are to the generate endpoint. Passes when the prompt ids, the placeholder ranges and the greedy
tokens are identical. float32 throughout, so that the two renderers' features (equal to
float32 rounding at 16 kHz) cannot tip a random model's argmax.

    .venv/bin/python scripts/vllm/generate_round_trip.py [--vllm-env ../vllm-env] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "core"))

from audiogate.vllm.fixtures import RENDER_REQUESTS, request_body  # noqa: E402

RENDER_PATH = "/v1/chat/completions/render"
GENERATE_PATH = "/inference/v1/generate"
SERVED = "tiny-qwen2-audio"
_BUILD = (
    "import sys; from pathlib import Path; sys.path.insert(0, {examples!r}); "
    "from generate_in_process import tiny_model; tiny_model(Path({out!r}))"
)


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


def _start(python: Path, model: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # The CPU backend's KV cache, in GiB: the tiny model needs little.
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    command += ["--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--dtype", "float32", "--max-model-len", "2048"]
    command += ["--enable-scale-out", "--enforce-eager", "--seed", "0"]
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)


def _wait(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"a vLLM server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(1.0)
    raise TimeoutError(f"a vLLM server did not start in {timeout_s:.0f} s")


def _audiogate_render(model: Path, body: dict[str, Any]) -> tuple[int, Any]:
    from starlette.testclient import TestClient

    from audiogate import AudioGate
    from audiogate.host import create_host
    from audiogate.server.app import ServerWorker, create_app
    from audiogate.server.vllm_render import VllmRenderConfig

    host = create_host()
    gate = AudioGate.from_model_dir(model, host=host, worker=ServerWorker(host))
    config = VllmRenderConfig(max_model_len=2048, dtype="float32")
    with TestClient(create_app(gate, served_model=SERVED, vllm=config)) as client:
        response = client.post(RENDER_PATH, json=body)
        return response.status_code, response.json()


def round_trip(vllm_env: Path, work: Path) -> dict[str, Any]:
    """Run the comparison in ``work``; the summary of what each renderer gave."""
    python = vllm_env / "bin" / "python"
    model = work / "model"
    if not (model / "config.json").exists():
        build = _BUILD.format(examples=str(ROOT / "examples" / "vllm"), out=str(model))
        subprocess.run(
            [str(python), "-c", build], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
    port = _free_port()
    server = _start(python, model, port, work / "vllm.log")
    try:
        _wait(port, server, 900)
        case = next(case for case in RENDER_REQUESTS if case.name == "mono16k_5s")
        body = {**request_body(case, SERVED), "temperature": 0.0, "max_tokens": 8}
        answers: dict[str, Any] = {}
        renders = {
            "vllm": _post(f"http://127.0.0.1:{port}{RENDER_PATH}", body),
            "audiogate": _audiogate_render(model, body),
        }
        for name, (status, rendered) in renders.items():
            if status != 200:
                raise RuntimeError(f"{name}'s render answered {status}: {rendered}")
            status, generated = _post(f"http://127.0.0.1:{port}{GENERATE_PATH}", rendered)
            if status != 200:
                raise RuntimeError(f"generate refused {name}'s render ({status}): {generated}")
            answers[name] = {
                "prompt_tokens": len(rendered["token_ids"]),
                "token_ids": rendered["token_ids"],
                "mm_placeholders": rendered["features"]["mm_placeholders"],
                "generated": generated["choices"][0]["token_ids"],
            }
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    ours, theirs = answers["audiogate"], answers["vllm"]
    return {
        "same_prompt": ours["token_ids"] == theirs["token_ids"],
        "same_placeholders": ours["mm_placeholders"] == theirs["mm_placeholders"],
        "same_tokens": ours["generated"] == theirs["generated"],
        "prompt_tokens": ours["prompt_tokens"],
        "audiogate_tokens": ours["generated"],
        "vllm_tokens": theirs["generated"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vllm-env", type=Path, default=ROOT.parent / "vllm-env")
    parser.add_argument("--keep", type=Path, help="work (and keep the tiny model) here")
    args = parser.parse_args(argv)
    if not (args.vllm_env / "bin" / "python").exists():
        parser.error(f"no vLLM environment at {args.vllm_env}; run scripts/vllm/setup_env.sh")
    work = args.keep or Path(tempfile.mkdtemp(prefix="audiogate-generate-"))
    work.mkdir(parents=True, exist_ok=True)
    summary = round_trip(args.vllm_env, work)
    print(json.dumps(summary, indent=1))
    same = summary["same_prompt"] and summary["same_placeholders"] and summary["same_tokens"]
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
