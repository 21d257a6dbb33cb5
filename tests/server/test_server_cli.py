"""``audiogate serve``: its options, and the real command serving a request end to end."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import attrs
import httpx
import pytest
import uvicorn
from serverkit import MODELS, PREPARE, chat, raw_error, wav_b64

import audiogate.cli.serve
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
    assert args.handler is audiogate.cli.serve.run
    assert args.workers == 2
    assert args.port == 0
    assert args.allow_url_fetch
    assert args.max_body_bytes == 8 << 20
    assert args.max_inflight_host_bytes == 1 << 30
    assert args.queue_depth is None


SIZE_OPTIONS = [
    "--max-queued-encoded-bytes",
    "--max-inflight-host-bytes",
    "--max-body-bytes",
    "--max-inflight-body-bytes",
    "--max-inflight-acquired-bytes",
]


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "0"],
        ["--workers", "-1"],
        ["--workers", "1025"],
        ["--queue-depth", "0"],
        ["--max-prefill-tokens", "0"],
        ["--max-body-bytes", "12 parsecs"],
        ["--port", "99999"],
        ["--port", "-1"],
        ["--port", "http"],
        *([option, size] for option in SIZE_OPTIONS for size in ("0", "0KiB", "-5")),
        *(
            [option, seconds]
            for option in ("--body-timeout", "--store-wait", "--store-retire-timeout")
            for seconds in ("0", "-0", "-1", "nan", "inf", "-inf", "1e999", "soon")
        ),
    ],
)
def test_bad_serve_options_are_usage_errors(argv, capsys) -> None:
    # Every value the limits refuse is refused here, in one usage line (exit 2), never
    # as a traceback from ServerLimits / WorkerLimits or uvicorn.
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--model", "m", *argv])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()[-1:]
    assert line.startswith(f"audiogate serve: error: argument {argv[0]}: ")


def test_the_smallest_and_largest_serve_values_make_valid_options(monkeypatch) -> None:
    from audiogate.server import run as run_module

    seen = []
    monkeypatch.setattr(run_module, "serve", lambda options, host=None: seen.append(options) or 0)
    sizes = [part for option in SIZE_OPTIONS for part in (option, "1")]
    counts = ["--workers", "1", "--queue-depth", "1", "--max-prefill-tokens", "1"]
    assert main(["serve", "--model", "m", *sizes, *counts, "--body-timeout", "0.001"]) == 0
    huge = [part for option in SIZE_OPTIONS for part in (option, "99999999999GiB")]
    counts = ["--workers", "1024", "--queue-depth", str(10**30), "--max-prefill-tokens", "1e3"]
    with pytest.raises(SystemExit):  # "1e3" is not an integer
        main(["serve", "--model", "m", *huge, *counts])
    counts[-1] = str(10**30)
    assert main(["serve", "--model", "m", *huge, *counts, "--body-timeout", "1e300"]) == 0
    smallest, largest = seen
    assert smallest.limits.max_body_bytes == 1
    assert smallest.limits.body_idle_timeout_s == 0.001
    assert smallest.worker.max_queued_encoded_bytes == 1
    assert largest.threads == 1024
    assert largest.limits.max_inflight_acquired_bytes == 99_999_999_999 << 30
    assert run_module._config(_tiny_app(), largest).timeout_graceful_shutdown > 0


def test_the_store_waits_are_options(monkeypatch) -> None:
    from audiogate.server import run as run_module
    from audiogate.server.budgets import ServerLimits
    from audiogate.server.options import ServeOptions
    from audiogate.store import DEFAULT_SOURCE_WAIT_S

    seen = []
    monkeypatch.setattr(run_module, "serve", lambda options, host=None: seen.append(options) or 0)
    assert main(["serve", "--model", "m"]) == 0
    flags = ["--store-wait", "2.5", "--store-retire-timeout", "0.25"]
    assert main(["serve", "--model", "m", *flags]) == 0
    default, given = seen
    assert (
        default.source_wait_s == DEFAULT_SOURCE_WAIT_S == ServeOptions(model_dir="m").source_wait_s
    )
    assert default.limits.retire_timeout_s == ServerLimits().retire_timeout_s == 60.0
    assert (given.source_wait_s, given.limits.retire_timeout_s) == (2.5, 0.25)
    # The store the server opens waits that long for a source still processing.
    opened = []

    def open_store(path, **kwargs):
        opened.append(kwargs)
        raise RuntimeError("opened")

    monkeypatch.setattr(run_module.SourceStore, "open", open_store)
    with pytest.raises(RuntimeError, match="opened"):
        run_module.build_app(attrs.evolve(given, store_dir="store"))
    assert opened[0]["wait_s"] == 2.5


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


@contextlib.contextmanager
def serve_command(*argv: str) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """``audiogate serve`` on the Gemma 3n example on an ephemeral port, in a subprocess:
    yields the process, its URL once bound, and the lines of its stderr so far."""
    command = [
        sys.executable,
        "-m",
        "audiogate.cli",
        "serve",
        "--model",
        str(MODELS / "gemma-3n-e4b-it"),
        "--port",
        "0",
        "--no-access-log",
        *argv,
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
            yield process, url[0], lines
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(60)
            reader.join(10)


@pytest.mark.slow
def test_the_serve_command_serves_until_terminated(tmp_path: Path) -> None:
    (tmp_path / "clip.wav").write_bytes(wav_bytes(tone(seconds=1.0), rate_hz=16_000))
    with serve_command("--media-path", str(tmp_path)) as (process, url, lines):
        with httpx.Client(base_url=url, timeout=60) as client:
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
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    text = "".join(lines)
    assert "Application shutdown complete" in text
    assert code == 0, text


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_ctrl_c_and_kill_shut_down_gracefully_and_exit_0(stop: signal.Signals) -> None:
    # uvicorn raises the signal it caught again after its graceful shutdown: with Python's
    # own handlers back, a KeyboardInterrupt traceback (SIGINT) or death by SIGTERM.
    with serve_command() as (process, url, lines):
        assert httpx.get(url + "/healthz", timeout=60).status_code == 200
        process.send_signal(stop)
        code = process.wait(60)
    text = "".join(lines)
    assert "Application shutdown complete" in text
    assert "Traceback" not in text
    assert code == 0, text


@pytest.mark.slow
def test_a_request_still_running_at_shutdown_gets_a_counted_503(tmp_path: Path) -> None:
    # uvicorn cancels requests still running when its graceful shutdown times out; left
    # to it, the client got a bare 500 that no metric counted.
    import json
    import socket
    import time
    from urllib.parse import urlsplit

    body = json.dumps(chat(wav_b64(0.5))).encode()
    # A trickle of 50 bytes/s: no minimum body rate, or it would be a 408 first.
    with serve_command("--body-timeout", "1", "--min-body-rate", "0") as (process, url, lines):
        address = urlsplit(url)
        sock = socket.create_connection((address.hostname, address.port), timeout=30)
        with sock:
            head = f"POST {PREPARE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
            time.sleep(0.3)  # the request is being read: it is in flight
            process.send_signal(signal.SIGTERM)
            reply = b""
            deadline = time.monotonic() + 30
            for byte in body[100:]:  # a body that never stalls, until the server answers
                if time.monotonic() > deadline:
                    break
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
                    if b"\r\n\r\n" in reply and reply.rstrip().endswith(b"}"):
                        break
                sock.setblocking(True)
                with contextlib.suppress(OSError):
                    sock.sendall(bytes([byte]))
                time.sleep(0.02)
        code = process.wait(60)
    error = raw_error(reply, 503)
    assert error["type"] == "WorkerUnavailableError"
    assert "shutting down" in error["message"]
    assert code == 0, "".join(lines)


def _start_failure(options, caplog) -> str:
    from audiogate.server import run as run_module

    # (Not gc.freeze() of the test process: what it holds would never be collected.)
    with (
        mock.patch.object(run_module, "freeze_start_up_objects", return_value=0),
        caplog.at_level(logging.ERROR, logger="audiogate.server"),
    ):
        assert run_module.serve(options) == run_module.START_FAILURE_EXIT == 2
    (message,) = [r.getMessage() for r in caplog.records if r.name == "audiogate.server"]
    return message


def test_a_port_in_use_is_a_start_failure_not_a_limit(tmp_path, monkeypatch, caplog) -> None:
    import socket

    from audiogate.server import run as run_module

    monkeypatch.setattr(run_module, "build_app", lambda options, host=None: _tiny_app())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        options = run_module.ServeOptions(model_dir=tmp_path, host="127.0.0.1", port=port)
        message = _start_failure(options, caplog)
    # The bind error itself, not uvicorn's exit code ("...: 3").
    assert message.startswith(f"the server could not start on 127.0.0.1:{port}: ")
    assert "address already in use" in message.lower()


def test_an_address_that_does_not_resolve_names_the_reason(tmp_path, monkeypatch, caplog) -> None:
    from audiogate.server import run as run_module

    monkeypatch.setattr(run_module, "build_app", lambda options, host=None: _tiny_app())
    options = run_module.ServeOptions(model_dir=tmp_path, host="999.1.1.1", port=0)
    message = _start_failure(options, caplog)
    prefix = "the server could not start on 999.1.1.1:0: "
    assert message.startswith(prefix)
    reason = message.removeprefix(prefix)
    assert not reason.isdigit()  # was uvicorn's SystemExit code, "3"
    assert reason  # the resolver's words ("Name or service not known", ...)


def _tiny_app():
    from starlette.applications import Starlette

    return Starlette()
