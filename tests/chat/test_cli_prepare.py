"""``audiogate prepare``: the summary table, JSON, ``--out`` and exit codes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from audiogate.cli import main
from audiogate.cli.prepare import ProgressBar
from audiogate.testing.audio import noise, wav_bytes

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
GEMMA = REPO / "examples" / "models" / "gemma-3n-e4b-it"
PHI = REPO / "examples" / "models" / "phi-4-multimodal-instruct"
VOXTRAL = REPO / "examples" / "models" / "voxtral-mini-3b-2507"
SPEECH = REPO / "examples" / "audio" / "speech_16k.wav"
SPEECH_44K = REPO / "examples" / "audio" / "speech_44k1_stereo.wav"

CLIP_KEYS = {
    "ordinal",
    "source_rate",
    "channels",
    "source_samples",
    "duration_us",
    "encoded_bytes",
    "normalized_samples",
    "effective_rate",
    "frames",
    "tokens",
}


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdout=out), out.getvalue()


def test_table_summary_with_prompt_on_a_bundled_checkpoint() -> None:
    code, text = run(
        "prepare", "--model", str(GEMMA), "--audio", str(SPEECH), "--audio", str(SPEECH_44K),
        "--prompt", "Summarize.",
    )  # fmt: skip
    assert code == 0, text
    lines = text.splitlines()
    assert lines[0].startswith("family gemma3n")
    header = next(line for line in lines if line.startswith("clip"))
    for title in (
        "source Hz",
        "ch",
        "duration s",
        "normalized",
        "effective Hz",
        "frames",
        "tokens",
    ):
        assert title in header
    row2 = next(line for line in lines if line.startswith("2 "))
    assert "44100" in row2
    assert " 2 " in row2
    assert any(line.startswith("total") for line in lines)
    assert "prefill positions:" in text


@pytest.mark.parametrize(
    ("model", "placeholder", "marker"),
    [
        ("phi-4-multimodal-instruct", "<|audio_1|>", "<|endoftext11|>"),
        ("phi-4-multimodal-instruct-hf", "<|audio|>", "<|audio|>"),
        ("gemma-3n-e4b-it", "<audio_soft_token>", "<audio_soft_token>"),
        ("qwen2-audio-7b-instruct", "[audio:{sha}]", "<|AUDIO|>"),
    ],
)
def test_a_placeholder_in_the_prompt_places_the_clip_with_a_model_dir(
    model: str, placeholder: str, marker: str
) -> None:
    import hashlib

    sha = hashlib.sha256(SPEECH.read_bytes()).hexdigest()
    code, text = run(
        "prepare", "--model", str(REPO / "examples" / "models" / model), "--audio", str(SPEECH),
        "--prompt", f"Transcribe {placeholder.format(sha=sha)} please.", "--show-prompt",
    )  # fmt: skip
    assert code == 0, text
    expanded = text.split("expanded prompt:\n", 1)[1]
    before, after = expanded.index("Transcribe"), expanded.index("please.")
    # --show-prompt folds the clip's run of audio tokens: "<marker> xN".
    assert before < expanded.index(f"{marker} x") < after
    assert placeholder.format(sha=sha) not in expanded or placeholder == marker


def test_json_summary_has_every_field() -> None:
    code, text = run(
        "prepare", "--model", str(PHI), "--audio", str(SPEECH), "--prompt", "Hi", "--json"
    )
    assert code == 0
    payload = json.loads(text)
    assert payload["family"] == "phi4mm"
    assert payload["policy_source"] == str(PHI)
    (clip,) = payload["clips"]
    assert set(clip) >= CLIP_KEYS
    assert clip["source_rate"] == 16_000
    assert clip["effective_rate"] == 16_000
    assert clip["tokens"] == -(-clip["frames"] // 8)
    totals = payload["totals"]
    assert totals["tokens"] == clip["tokens"]
    assert totals["prefill_positions"] > clip["tokens"]


def test_family_defaults_without_a_checkpoint_and_without_a_prompt() -> None:
    code, text = run("prepare", "--family", "qwen2audio", "--audio", str(SPEECH), "--json")
    assert code == 0
    payload = json.loads(text)
    assert payload["policy_source"] == "--family qwen2audio"
    assert "prefill_positions" not in payload["totals"]


def test_out_writes_features_masks_and_input_ids(tmp_path: Path) -> None:
    target = tmp_path / "prepared.npz"
    code, _ = run(
        "prepare",
        "--model",
        str(GEMMA),
        "--audio",
        str(SPEECH),
        "--prompt",
        "Hi",
        "--out",
        str(target),
    )
    assert code == 0
    with np.load(target) as data:
        assert set(data.files) == {"features_1", "mask_1", "input_ids"}
        assert data["features_1"].shape[1] == 128
        assert data["mask_1"].dtype == bool
        assert data["input_ids"].dtype == np.int64


def test_exit_codes_for_bad_input_limits_and_missing_files(tmp_path: Path, capsys) -> None:
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x04\x00\x00\x00WAVE")
    code, _ = run("prepare", "--family", "gemma3n", "--audio", str(corrupt))
    assert code == 2
    assert "corrupt" in capsys.readouterr().err
    long = tmp_path / "long.wav"
    long.write_bytes(wav_bytes(noise(samples=16_000 * 31), rate_hz=16_000))
    code, _ = run("prepare", "--family", "gemma3n", "--audio", str(long))
    assert code == 3
    err = capsys.readouterr().err
    assert "limit exceeded" in err
    assert err.count("\n") == 1
    code, _ = run("prepare", "--family", "gemma3n", "--audio", str(tmp_path / "absent.wav"))
    assert code == 2


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_only() -> None:
    stream = FakeTerminal()
    bar = ProgressBar(stream, enabled=True)
    bar("decode", 0, 2)
    bar("features", 1, 2)
    bar("done", 2, 2)
    assert "clip 1/2: decode" in stream.getvalue()
    assert "clip 2/2: features" in stream.getvalue()
    quiet = io.StringIO()
    ProgressBar(quiet, enabled=False)("decode", 0, 1)
    assert quiet.getvalue() == ""


def test_out_reports_the_file_written_and_refuses_an_unwritable_path(tmp_path, capsys) -> None:
    base = ["prepare", "--model", str(GEMMA), "--audio", str(SPEECH), "--prompt", "Hi"]
    code, text = run(*base, "--out", str(tmp_path / "prepared"))
    assert code == 0
    assert f"wrote {tmp_path / 'prepared.npz'}" in text
    assert (tmp_path / "prepared.npz").is_file()
    code, _ = run(*base, "--out", str(tmp_path / "missing" / "x.npz"))
    assert code == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["policy"],
        ["prepare", "--audio", "x.wav"],
        ["prepare", "--family", "gemma3n", "--model", "m", "--audio", "x.wav"],
    ],
)
def test_usage_errors_exit_2_with_a_message(argv, capsys) -> None:
    code, _ = run(*argv)
    assert code == 2
    assert "give exactly one of" in capsys.readouterr().err


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_audio_dash_reads_the_clip_from_stdin(monkeypatch) -> None:
    base = ["prepare", "--model", str(GEMMA), "--prompt", "Hi", "--json"]
    _, from_file = run(*base, "--audio", str(SPEECH))
    _stdin(monkeypatch, SPEECH.read_bytes())
    code, from_stdin = run(*base, "--audio", "-")
    assert code == 0
    assert json.loads(from_stdin)["clips"] == json.loads(from_file)["clips"]


def test_audio_dash_is_one_clip_and_needs_a_pipe(monkeypatch, capsys) -> None:
    _stdin(monkeypatch, SPEECH.read_bytes())
    code, _ = run("prepare", "--family", "gemma3n", "--audio", "-", "--audio", str(SPEECH))
    assert code == 2
    assert "--audio - (standard input) is one clip" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    code, _ = run("prepare", "--family", "gemma3n", "--audio", "-")
    assert code == 2
    assert "pipe one in" in capsys.readouterr().err


def test_audio_dash_reads_no_more_than_the_clip_cap(monkeypatch, capsys) -> None:
    from audiogate.acquire import AcquisitionPolicy
    from audiogate.api import AudioGate

    cap = AcquisitionPolicy().narrowed(AudioGate.from_family("gemma3n").policy).max_bytes_per_clip
    stream = io.BytesIO(SPEECH.read_bytes() + bytes(cap))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(stream))
    code, _ = run("prepare", "--family", "gemma3n", "--audio", "-")
    assert code != 0
    assert stream.tell() == cap + 1  # refused by size, not read to the end
    assert "audiogate: error:" in capsys.readouterr().err


def test_show_prompt_folds_runs_of_a_repeated_audio_token() -> None:
    code, text = run(
        "prepare", "--model", str(GEMMA), "--audio", str(SPEECH), "--prompt", "Hi", "--show-prompt"
    )
    assert code == 0
    prompt = text.split("expanded prompt:\n", 1)[1]
    assert "<start_of_audio><audio_soft_token> x188<end_of_audio>" in prompt
    assert "<audio_soft_token><audio_soft_token>" not in prompt


def test_show_prompt_folds_voxtrals_bracketed_audio_runs() -> None:
    code, text = run(
        "prepare",
        "--model",
        str(VOXTRAL),
        "--audio",
        str(SPEECH),
        "--prompt",
        "Hi",
        "--show-prompt",
    )
    assert code == 0
    prompt = text.split("expanded prompt:\n", 1)[1]
    assert re.search(r"\[BEGIN_AUDIO\]\[AUDIO\] x\d+", prompt), prompt
    assert "[AUDIO][AUDIO]" not in prompt


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("a<x><x><x>b", "a<x> x3b"),
        ("<x><x>", "<x><x>"),  # two stay as they are
        ("<|AUDIO|>" * 57 + "<y><y><y>", "<|AUDIO|> x57<y> x3"),
        ("<x><x><x>\n<x>", "<x> x3\n<x>"),
        ("no tokens", "no tokens"),
        ("[INST][BEGIN_AUDIO]" + "[AUDIO]" * 375 + "Hi", "[INST][BEGIN_AUDIO][AUDIO] x375Hi"),
        ("[a][a][a] [AUDIO][AUDIO]", "[a][a][a] [AUDIO][AUDIO]"),  # user text; two stay
    ],
)
def test_fold_repeats(text: str, folded: str) -> None:
    from audiogate.cli import fold_repeats

    assert fold_repeats(text) == folded


def test_json_out_says_where_it_wrote_on_stderr(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["prepare", "--model", str(GEMMA), "--audio", str(SPEECH), "--json"]
    code, text = run(*base, "--out", "relative")
    assert code == 0
    json.loads(text)  # stdout stays JSON
    assert f"wrote {tmp_path / 'relative.npz'}" in capsys.readouterr().err


def test_the_readme_writes_its_example_features_outside_the_repository() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    outs = [
        line.split("--out ", 1)[1].split()[0] for line in readme.splitlines() if "--out " in line
    ]
    assert outs
    assert all(Path(out).is_absolute() for out in outs), outs


CORPUS = REPO / "tests" / "data" / "audio"


@pytest.mark.parametrize(
    "name",
    ["mp3-vbr-mono-22050.mp3", "flac-s16-stereo-44100.flac", "vorbis-mono-16000.ogg"],
)
def test_audio_takes_every_accepted_format_recognised_from_the_bytes(name: str) -> None:
    pytest.importorskip("soundfile")
    code, text = run("prepare", "--family", "gemma3n", "--audio", str(CORPUS / name), "--json")
    assert code == 0, text
    (clip,) = json.loads(text)["clips"]
    assert clip["tokens"] == 188
    assert clip["encoded_bytes"] == (CORPUS / name).stat().st_size


def test_prepare_help_lists_the_accepted_formats(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    help_text = capsys.readouterr().out
    for name in ("RF64", "AIFF-C", "FLAC", "MP3", "Ogg Vorbis", "Opus", "AAC", "mu-law"):
        assert name in help_text
