"""The ``audiogate`` CLI: families, policy, schema, and exit codes."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shipped import shipped_families

from audiogate.api import AudioGate
from audiogate.cli import main
from audiogate.policy import build_schema, dump_schema


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


def test_families_lists_distribution_version_model_types_revision() -> None:
    code, text = run("families")
    assert code == 0
    assert "audiogate-phi4mm" in text
    assert "phi4mm, phi4_multimodal" in text
    assert "audiogate-gemma3n" in text
    assert "181beb3ba4c47098ed8cbc97ee250d1d45ae0107" in text
    assert "audiogate-qwen2audio" in text
    assert "qwen2_audio" in text


def test_families_json() -> None:
    code, text = run("families", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(text)}
    assert rows["phi4mm"]["revision"] == "93f923e1a7727d1c4f446756212d9d3e8fcc5d81"
    assert rows["gemma3n"]["distribution"] == "audiogate-gemma3n"


def test_policy_of_a_model_dir_shows_values_and_sources(model_dir) -> None:
    root = model_dir("gemma3n", preprocessor={"feature_extractor": {"max_length": 160_000}})
    code, text = run("policy", str(root))
    assert code == 0
    assert "family gemma3n" in text
    line = next(row for row in text.splitlines() if row.startswith("max_samples_per_clip "))
    assert "160000" in line
    assert "preprocessor_config.json:/feature_extractor/max_length" in line
    line = next(row for row in text.splitlines() if row.startswith("max_clips "))
    assert "pinned@181beb3ba4c4" in line


def test_policy_json_has_every_value_and_its_source(model_dir) -> None:
    root = model_dir("phi4mm", config={"audiogate_audio_limits": {"max_clips": 4}})
    code, text = run("policy", str(root), "--json")
    assert code == 0
    payload = json.loads(text)
    assert payload["family"] == "phi4mm"
    assert payload["values"]["max_clips"] == 4
    assert payload["sources"]["max_clips"] == "config.json:/audiogate_audio_limits/max_clips"
    assert set(payload["sources"]) >= {k for k in payload["values"] if k != "options"}


def test_policy_of_a_family(capsys) -> None:
    code, text = run("policy", "--family", "qwen2audio")
    assert code == 0
    assert "192000" in text
    assert "strict_source_rates" in text


def test_bad_config_exits_non_zero_with_one_line(model_dir, capsys) -> None:
    root = model_dir("gemma3n", preprocessor={"sampling_rate": 24_000})
    code, _ = run("policy", str(root))
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("audiogate: error: ")
    assert "preprocessor_config.json at /sampling_rate" in err
    assert "24000" in err


def test_unknown_family_exits_non_zero(capsys) -> None:
    code, _ = run("policy", "--family", "nope")
    assert code == 2
    assert "installed families" in capsys.readouterr().err


def test_policy_needs_exactly_one_source(capsys) -> None:
    code, _ = run("policy")
    assert code == 2  # a usage error, as argparse's own
    assert "give exactly one of MODEL_DIR or --family NAME" in capsys.readouterr().err


@pytest.mark.parametrize("family", [family.name for family in shipped_families()])
def test_schema_prints_the_family_schema(family: str, host) -> None:
    code, text = run("schema", family)
    assert code == 0
    spec = host.family(family).spec
    assert json.loads(text) == json.loads(dump_schema(build_schema(family, spec.keys)))


@pytest.mark.install
@pytest.mark.slow
@pytest.mark.parametrize("module", ["audiogate.cli", "audiogate"])
def test_console_script_is_installed(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "families"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "gemma3n" in result.stdout


class ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_stops_quietly(capsys) -> None:
    # ``audiogate policy ... | head -1``: the reader went away.
    assert main(["policy", "--family", "gemma3n"], stdout=ClosedPipe()) == 0
    assert capsys.readouterr().err == ""


# --- prepare: --out checked first, interruptions -------------------------------------

SPEECH = Path(__file__).resolve().parents[2] / "examples" / "audio" / "speech_16k.wav"


@pytest.fixture
def no_work(monkeypatch) -> None:
    """Fail the test if the command gets as far as preparing audio."""

    def prepare(*args, **kwargs):
        pytest.fail("the work was done before the output path was checked")

    monkeypatch.setattr(AudioGate, "prepare", prepare)


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_an_unwritable_out_is_refused_before_any_work(json_flag, tmp_path, no_work, capsys) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    targets = {
        f"{tmp_path}/missing/x.npz": f"{tmp_path}/missing does not exist",
        f"{tmp_path}/a-file/x.npz": f"{tmp_path}/a-file is not a directory",
        str(tmp_path): "it is a directory",  # np.savez wrote <dir>.npz, exit 0
        f"{tmp_path}/sub/": "it is a directory",
    }
    for target, reason in targets.items():
        base = ["prepare", "--family", "gemma3n", "--audio", str(SPEECH), *json_flag]
        code, out = run(*base, "--out", target)
        err = capsys.readouterr().err
        assert (code, out) == (2, ""), err  # no summary printed for a failed command
        assert err.startswith("audiogate prepare: cannot write ")
        assert err.endswith(f": {reason}\n")
        assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    assert not tmp_path.with_name(tmp_path.name + ".npz").exists()


def test_a_failed_write_prints_no_result_and_leaves_no_partial_file(
    tmp_path, monkeypatch, capsys
) -> None:
    import numpy as np

    def savez(file, **arrays) -> None:
        file.write(b"PK\x03\x04 half an archive")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", savez)
    target = tmp_path / "x.npz"
    code, out = run(
        "prepare", "--family", "gemma3n", "--audio", str(SPEECH), "--json", "--out", str(target)
    )
    assert (code, out) == (2, "")
    assert (
        capsys.readouterr().err
        == f"audiogate prepare: cannot write {target}: No space left on device\n"
    )
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []  # no partial file either
    # A file already there survives a failed rewrite.
    target.write_bytes(b"the last good result")
    code, out = run("prepare", "--family", "gemma3n", "--audio", str(SPEECH), "--out", str(target))
    assert code == 2
    assert target.read_bytes() == b"the last good result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]


def test_an_interrupted_prepare_exits_130_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(AudioGate, "prepare", interrupted)
    target = tmp_path / "x.npz"
    code, out = run("prepare", "--family", "gemma3n", "--audio", str(SPEECH), "--out", str(target))
    assert (code, out) == (130, "")
    assert capsys.readouterr().err == "audiogate: cancelled (interrupted)\n"
    assert not target.exists()


# The real prepare, over and over until cancelled: it cannot finish before the signal,
# and the signal lands inside the pipeline's own work (decode, resample, features).
ENDLESS_PREPARE = """
import pathlib, signal, sys
import audiogate.request
from audiogate.cli import main

# As on a terminal, even where the test runner's parent ignores SIGINT.
signal.signal(signal.SIGINT, signal.default_int_handler)

real = audiogate.request.process_request

def endless(*args, **kwargs):
    pathlib.Path(sys.argv[1]).touch()
    while True:
        real(*args, **kwargs)

audiogate.request.process_request = endless
sys.exit(main(sys.argv[2:]))
"""


def signalled_once_started(
    script: str, started: Path, argv: list[str], sig: signal.Signals, delay_s: float = 0.0
) -> tuple[int, str, str]:
    """Run ``script`` (which touches ``started`` once its work has begun) with ``argv``,
    send ``sig`` ``delay_s`` after that, and return its exit code, stdout and stderr."""
    with subprocess.Popen(
        [sys.executable, "-c", script, str(started), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the work did not start"
            time.sleep(0.01)
        time.sleep(delay_s)
        process.send_signal(sig)
        try:
            out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()  # a failed test leaves no process running
            out, err = process.communicate()
            raise AssertionError(f"still running 60 s after {sig.name}: {err[-2000:]}") from None
    return process.returncode, out, err


@pytest.mark.slow
def test_ctrl_c_during_a_long_prepare_exits_130_without_a_traceback(tmp_path) -> None:
    from audiogate.testing.audio import tone, wav_bytes

    audio = tmp_path / "long.wav"
    audio.write_bytes(wav_bytes(tone(seconds=120.0, rate_hz=32_000), rate_hz=32_000))
    started, target = tmp_path / "started", tmp_path / "out.npz"
    argv = ["prepare", "--family", "phi4mm", "--audio", str(audio), "--out", str(target)]
    # 0.3 s after the start: well inside the pipeline.
    code, out, err = signalled_once_started(ENDLESS_PREPARE, started, argv, signal.SIGINT, 0.3)
    assert code == 130, err  # its worker thread has stopped too
    assert err == "audiogate: cancelled (interrupted)\n"
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.wav", "started"]


# An object whose finaliser says the work has started, then sleeps: a signal sent then
# lands in ``__del__``, where Python prints a KeyboardInterrupt as "Exception ignored" and
# drops it.
FINALISER = """
class Finaliser:
    def __del__(self):
        import pathlib, sys, time
        pathlib.Path(sys.argv[1]).touch()
        time.sleep(1.0)
"""

# ENDLESS_PREPARE with the finaliser run first.
ENDLESS_PREPARE_FROM_A_FINALISER = ENDLESS_PREPARE.replace(
    "def endless(*args, **kwargs):\n    pathlib.Path(sys.argv[1]).touch()\n",
    FINALISER + "\ndef endless(*args, **kwargs):\n    Finaliser()\n",
)


def test_ctrl_c_that_lands_in_a_finaliser_still_stops_the_prepare(tmp_path) -> None:
    assert "Finaliser()" in ENDLESS_PREPARE_FROM_A_FINALISER
    started, target = tmp_path / "started", tmp_path / "out.npz"
    argv = ["prepare", "--family", "gemma3n", "--audio", str(SPEECH), "--out", str(target)]
    code, out, err = signalled_once_started(
        ENDLESS_PREPARE_FROM_A_FINALISER, started, argv, signal.SIGINT, 0.3
    )
    assert code == 130, err
    assert err == "audiogate: cancelled (interrupted)\n"  # nothing "ignored"
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started"]


# The model load, made endless: SIGTERM arrives before uvicorn handles signals.
ENDLESS_LOAD = """
import pathlib, sys, time
import audiogate.api
from audiogate.cli import main

def loading(*args, **kwargs):
    pathlib.Path(sys.argv[1]).touch()
    while True:
        time.sleep(0.01)

audiogate.api.AudioGate.from_model_dir = loading
sys.exit(main(sys.argv[2:]))
"""


def test_sigterm_while_the_server_loads_its_model_exits_130_in_one_line(tmp_path) -> None:
    started = tmp_path / "started"
    model = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"
    argv = ["serve", "--model", str(model), "--port", "0"]
    code, out, err = signalled_once_started(ENDLESS_LOAD, started, argv, signal.SIGTERM)
    assert code == 130, err
    assert "Traceback" not in err
    assert err.endswith("audiogate: cancelled (interrupted)\n")
    assert out == ""


# A model load that the finaliser slows, then finishes: the signal lands in the finaliser,
# where Python drops the KeyboardInterrupt, and the server must not start anyway.
LOAD_PAST_A_DROPPED_SIGNAL = (
    """
import sys
import audiogate.api
from audiogate.cli import main

real = audiogate.api.AudioGate.from_model_dir
"""
    + FINALISER
    + """
def loading(*args, **kwargs):
    Finaliser()
    return real(*args, **kwargs)

audiogate.api.AudioGate.from_model_dir = loading
sys.exit(main(sys.argv[2:]))
"""
)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_dropped_while_the_model_loads_still_stops_the_server(tmp_path, stop) -> None:
    started = tmp_path / "started"
    model = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"
    argv = ["serve", "--model", str(model), "--port", "0"]
    script = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    code, out, err = signalled_once_started(
        script + LOAD_PAST_A_DROPPED_SIGNAL, started, argv, stop, 0.3
    )
    assert code == 130, err
    assert "Exception ignored" in err  # where it landed, as Python says
    assert err.endswith("audiogate: cancelled (interrupted)\n")
    assert "Uvicorn running" not in err
    assert out == ""


def test_serve_help_describes_the_endpoints_and_the_request_body(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    for line in ("POST /v1/audio/prepare", "GET  /metrics", "GET  /healthz"):
        assert line in text
    assert '"messages": [{"role": "user", "content": [' in text
    assert '"input_audio": {"data": "<base64 WAV>", "format": "wav"}' in text
    assert '"audiogate": {"feature_format": "npy", "return_features": true}' in text


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["families"],
        ["policy", "examples/models/qwen2-audio-7b-instruct"],
        [
            "prepare",
            "--model",
            "examples/models/gemma-3n-e4b-it",
            "--prompt",
            "Hi",
            "--audio",
            "examples/audio/speech_16k.wav",
        ],
    ],
)
def test_no_command_prints_the_transformers_notice_about_a_missing_torch(argv) -> None:
    """Without torch, importing transformers advises that PyTorch was not found; no
    command uses torch, so none prints it (the tokenizers still load)."""
    pytest.importorskip("transformers")
    script = (
        "import sys; sys.modules['torch'] = None\n"  # as if torch were not installed
        "from audiogate.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "PyTorch" not in done.stderr + done.stdout
    # The check is real: the same import without the CLI prints it.
    bare = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['torch'] = None; import transformers"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert "PyTorch was not found" in bare.stderr
