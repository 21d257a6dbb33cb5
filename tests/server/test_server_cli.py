"""``audiogate serve``: its options, and the real command serving a request end to end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import uvicorn
from serverkit import MODELS, PREPARE, chat, wav_b64

from audiogate.cli import EXIT_BAD_INPUT, build_parser, main
from audiogate.server.run import parse_size
from audiogate.testing.audio import tone, wav_bytes


def test_serve_options_parse() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model",
            "m",
            "--port",
            "0",
            "--workers",
            "2",
            "--media-path",
            "/srv/media",
            "--allow-url-fetch",
            "--max-body-bytes",
            "8MiB",
            "--max-inflight-host-bytes",
            "1GiB",
        ]
    )
    assert args.handler.__name__ == "_cmd_serve"
    assert args.workers == 2
    assert args.port == 0
    assert args.allow_url_fetch
    assert args.max_body_bytes == 8 << 20
    assert args.max_inflight_host_bytes == 1 << 30
    assert args.queue_depth is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "0"],
        ["--max-body-bytes", "12 parsecs"],
        ["--port", "99999"],
        ["--port", "-1"],
        ["--port", "http"],
    ],
)
def test_bad_serve_options_are_usage_errors(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--model", "m", *argv])
    assert exit_info.value.code == 2


def test_parse_size() -> None:
    assert parse_size("123") == 123
    assert parse_size("64MiB") == 64 << 20
    assert parse_size(" 2 gib ") == 2 << 30
    with pytest.raises(ValueError, match="not a size"):
        parse_size("1.5MiB")


def test_a_directory_without_config_is_a_bad_input_exit(tmp_path, capsys) -> None:
    assert main(["serve", "--model", str(tmp_path), "--port", "0"]) == EXIT_BAD_INPUT
    assert "audiogate: error:" in capsys.readouterr().err


def test_a_media_path_that_is_not_a_directory_refuses_to_start(
    tmp_path, capsys, monkeypatch
) -> None:
    def started(self, *args, **kwargs) -> None:
        pytest.fail("the server started with a missing media root")

    monkeypatch.setattr(uvicorn.Server, "run", started)
    missing = tmp_path / "missing-media"
    (tmp_path / "a-file").write_bytes(b"")
    for root in (missing, tmp_path / "a-file"):
        argv = ["serve", "--model", str(MODELS / "gemma-3n-e4b-it"), "--port", "0"]
        assert main([*argv, "--media-path", str(root)]) == EXIT_BAD_INPUT
        # The operator's own console names the path (requests never see it).
        err = capsys.readouterr().err
        assert f"audiogate: error: the media root (--media-path) '{root}'" in err
        assert "is not a directory" in err


def test_the_serve_command_serves_until_terminated(tmp_path: Path) -> None:
    (tmp_path / "clip.wav").write_bytes(wav_bytes(tone(seconds=1.0), rate_hz=16_000))
    command = [
        sys.executable,
        "-m",
        "audiogate.cli",
        "serve",
        "--model",
        str(MODELS / "gemma-3n-e4b-it"),
        "--port",
        "0",
        "--media-path",
        str(tmp_path),
        "--no-access-log",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    lines: list[str] = []
    bound = threading.Event()
    url: list[str] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) as process:

        def read() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(line)
                match = re.search(r"running on (http://\S+)", line)
                if match:
                    url.append(match.group(1))
                    bound.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert bound.wait(120), "".join(lines)
            with httpx.Client(base_url=url[0], timeout=60) as client:
                assert client.get("/healthz").json()["family"] == "gemma3n"
                request = chat(wav_b64(1.0))
                request["messages"][0]["content"].insert(
                    0, {"type": "audio_url", "audio_url": {"url": "file://clip.wav"}}
                )
                response = client.post(PREPARE, json=request)
                assert response.status_code == 200, response.text
                clips = response.json()["clips"]
                assert [c["encoded_bytes"] for c in clips] == [32_044, 32_044]
                metrics = client.get("/metrics").text
                assert 'audiogate_audio_preprocess_completed_total{family="gemma3n"} 1.0' in metrics
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(60)
            reader.join(10)
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert code in {0, -signal.SIGTERM}, "".join(lines)
    assert "Application shutdown complete" in "".join(lines)


def test_a_port_in_use_is_a_start_failure_not_a_limit(tmp_path, monkeypatch) -> None:
    import socket

    from audiogate.server import run as run_module

    monkeypatch.setattr(run_module, "build_app", lambda options, host=None: _tiny_app())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        options = run_module.ServeOptions(model_dir=tmp_path, host="127.0.0.1", port=port)
        assert run_module.serve(options) == run_module.START_FAILURE_EXIT == 2


def _tiny_app():
    from starlette.applications import Starlette

    return Starlette()
