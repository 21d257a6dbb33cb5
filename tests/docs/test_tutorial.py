"""The plugin tutorial is true: its code quotes are verbatim and its commands run (CI).

``scripts/run_tutorial.py`` does the work; these tests run it and check its matcher.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest


def test_every_quoted_excerpt_is_verbatim_in_the_example_plugin(run_tutorial) -> None:
    text = run_tutorial.TUTORIAL.read_text("utf-8")
    assert len(run_tutorial.excerpts(text)) >= 8
    assert run_tutorial.stale_excerpts(text) == []


def test_the_layout_lists_every_file_of_the_example_package(run_tutorial) -> None:
    """Section 1's tree names exactly the files of ``audiogate_toyvoice/``: the family
    file map the tutorial teaches is the one the example plugin has."""
    text = run_tutorial.TUTORIAL.read_text("utf-8")
    layout = text[text.index("## 1. The layout") : text.index("## 2.")]
    listed = set(re.findall(r"^│   [├└]── (\S+)", layout, flags=re.MULTILINE))
    package = run_tutorial.ROOT / "examples/plugins/audiogate-toyvoice/audiogate_toyvoice"
    shipped = {p.name for p in package.iterdir() if p.is_file() and p.suffix != ".pyc"}
    assert listed == shipped


def test_a_stale_excerpt_is_reported(run_tutorial) -> None:
    markdown = (
        "<!-- tutorial:excerpt examples/plugins/audiogate-toyvoice/pyproject.toml -->\n"
        '```toml\nname = "not-the-name"\n```\n'
    )
    (problem,) = run_tutorial.stale_excerpts(markdown)
    assert "tutorial line 3" in problem
    assert "pyproject.toml" in problem


def test_the_tutorial_runs_install_families_and_the_contract_suite(run_tutorial) -> None:
    commands = [
        c.text for b in run_tutorial.run_blocks(run_tutorial.TUTORIAL.read_text("utf-8")) for c in b
    ]
    assert commands[0].startswith("python -m pip install")
    assert "-e examples/plugins/audiogate-toyvoice" in commands[0]
    assert "audiogate families" in commands
    assert "python -m pytest examples/plugins/audiogate-toyvoice/tests -q" in commands


def test_run_blocks_join_continuations_and_collect_expected_output(run_tutorial) -> None:
    markdown = (
        "intro\n<!-- tutorial:run -->\n```console\n$ echo a \\\n    b\na b\n$ true\n```\n"
        "```console\n$ not run\n```\n"
    )
    (block,) = run_tutorial.run_blocks(markdown)
    assert [(c.text, c.expected) for c in block] == [
        ("echo a \\\n    b", ["a b"]),
        ("true", []),
    ]


@pytest.mark.parametrize(
    ("expected", "actual", "missing"),
    [
        (["a  b", "...", "d ... f"], "a b\nc\nd e f\n", None),
        (["... passed in ..."], "12 passed in 3.2s\n", None),
        (["b", "a"], "a\nb\n", "a"),
        (["toyvoice 0.1.0"], "toyvoice 0.2.0\n", "toyvoice 0.1.0"),
    ],
)
def test_output_matching(run_tutorial, expected, actual, missing) -> None:
    assert run_tutorial.output_matches(expected, actual) == missing


@pytest.mark.install
@pytest.mark.slow
def test_the_tutorial_commands_run_as_written(run_tutorial: ModuleType, tmp_path: Path) -> None:
    """Install the example plugin in a throwaway environment and run every command."""
    problems = run_tutorial.run_tutorial(tmp_path)
    assert not problems, "\n\n".join(problems)


def _section(text: str, start: str, stop: str) -> str:
    return text[text.index(start) : text.index(stop, text.index(start))]


def test_the_pinned_defaults_example_names_every_required_policy_field(run_tutorial) -> None:
    """The quoted ``PINNED`` sets, and the text lists, every field without a default."""
    import attrs

    from audiogate.policy import AudioPolicy

    required = [f.name for f in attrs.fields(AudioPolicy) if f.default is attrs.NOTHING]
    text = run_tutorial.TUTORIAL.read_text("utf-8")
    section = _section(text, "## 3. Pinned defaults", "The per-clip limits")
    pinned = next(e.code for e in run_tutorial.excerpts(section) if "PINNED" in e.code)
    assert pinned.rstrip().endswith(")")  # the whole call, not its first lines
    for name in required:
        assert f"    {name}=" in pinned, name
        assert f"`{name}`" in section, name
    words = {8: "Eight", 15: "Fifteen", 18: "Eighteen"}
    assert f"{words[len(required)]} fields have no default" in section


# (frame_length_samples, frame_hop_samples, pad_multiple_samples, min_samples, frames(n))
CENTRED_FRAMINGS = {
    "| as is | 400 | 160 | 1 | 400 |": (400, 160, 1, 400, lambda n: (n - 400) // 160 + 1),
    "| centred, `1 + n // 160` | 0 | 160 | 1 | 201 |": (0, 160, 1, 201, lambda n: 1 + n // 160),
    "| `n // 160` | 160 | 160 | 1 | 160 |": (160, 160, 1, 160, lambda n: n // 160),
    "| `ceil(n / 160)` (": (160, 160, 160, 1, lambda n: -(-n // 160)),
}


def _centred_snippet(run_tutorial, n: int) -> dict:
    """Run the tutorial's centred-framing snippet on ``n`` samples; its namespace."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    text = run_tutorial.TUTORIAL.read_text("utf-8")
    section = _section(text, "### Centred (Whisper-style) framing", "### The DSP toolkit")
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace = {
        "np": np,
        "sliding_window_view": sliding_window_view,
        "N_FFT": 400,
        "FRAME_HOP_SAMPLES": 160,
        "waveform": np.linspace(-1.0, 1.0, n),
    }
    exec(code, namespace)
    return namespace


@pytest.mark.parametrize("n", [201, 202, 359, 360, 361, 36_552])
def test_the_centred_framing_example_frames_what_it_counts(run_tutorial, n: int) -> None:
    namespace = _centred_snippet(run_tutorial, n)
    assert namespace["framed"].shape == (namespace["frame_count"](n), 400)
    assert namespace["frame_count"](n) == 1 + n // 160
    assert namespace["frame_count"](200) == 0
    # Frame 0 is centred on sample 0: samples 200..1 mirrored in front of it.
    np = namespace["np"]
    waveform = namespace["waveform"]
    np.testing.assert_array_equal(namespace["framed"][0][:200], waveform[200:0:-1])
    np.testing.assert_array_equal(namespace["framed"][0][200:], waveform[:200])
    text = run_tutorial.TUTORIAL.read_text("utf-8")
    for row in ("| as is (toyvoice) | `(n - 400) // 160 + 1` | 226 |", "| 229 |", "| 228 |"):
        assert row in text


@pytest.mark.slow
def test_the_centred_framing_example_counts_what_torch_stft_frames(run_tutorial) -> None:
    """``torch.stft`` with ``center=True`` frames as many rows, and refuses what the
    snippet refuses."""
    torch = pytest.importorskip("torch")
    window = torch.hann_window(400)
    for n in (201, 202, 359, 360, 361, 36_552):
        namespace = _centred_snippet(run_tutorial, n)
        stft = torch.stft(torch.zeros(n), 400, 160, window=window, return_complex=True)
        assert namespace["frame_count"](n) == stft.shape[1], n
    with pytest.raises(RuntimeError, match=r"[Pp]adding size"):
        torch.stft(torch.zeros(200), 400, 160, window=window, return_complex=True)


@pytest.mark.parametrize("row", list(CENTRED_FRAMINGS))
def test_each_framings_policy_settings_estimate_its_frames(run_tutorial, row: str) -> None:
    """Each row of the tutorial's framing table makes ``estimate_frames`` count exactly
    its formula from its ``min_samples_per_clip`` on (what the contract suite checks)."""
    from audiogate.policy import AudioPolicy

    assert row in run_tutorial.TUTORIAL.read_text("utf-8")
    length, hop, pad, shortest, frames = CENTRED_FRAMINGS[row]
    policy = AudioPolicy(
        family="x",
        revision="r",
        resampling="soxr_hq",
        max_duration_seconds=1,
        max_samples_per_clip=16_000,
        max_encoded_bytes_per_clip=1,
        max_frames_per_clip=1,
        max_encoded_bytes_per_request=1,
        max_source_samples_per_request=1,
        max_normalized_samples_per_request=1,
        max_source_duration_us_per_request=1,
        max_frames_per_request=1,
        max_waveform_result_bytes_per_request=1,
        max_waveform_working_bytes_per_request=1,
        max_prepared_result_bytes_per_request=1,
        frame_length_samples=length,
        frame_hop_samples=hop,
        pad_multiple_samples=pad,
        min_samples_per_clip=shortest,
        placeholder="rows_per_clip",
    )
    for n in range(shortest, 2_000):
        assert policy.estimate_frames(n) == frames(n), n
    assert frames(shortest) >= 1


def test_the_recommended_lint_settings_pass_on_the_example_plugin(
    run_tutorial, tmp_path: Path
) -> None:
    """Section 12's ruff settings (ANN401 ignored: the hook spec's own ``Any``, which the
    stages repeat) lint the
    example package clean. Import grouping (I001) follows where a package lives: in this
    repository ``audiogate`` sorts as first-party."""
    import subprocess
    import sys

    text = run_tutorial.TUTORIAL.read_text("utf-8")
    section = text[text.index("## 12. Before you publish") :]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "pyproject.toml"
    config.write_text("\n".join(line.removeprefix("  ") for line in toml.splitlines()))
    assert '"ANN401"' in config.read_text()
    example = run_tutorial.ROOT / "examples/plugins/audiogate-toyvoice"
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(config), "--ignore", "I001", "."],
        cwd=example,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Without the ignore, the stages' own Any (the tokenizer) is flagged.
    text = config.read_text()
    config.write_text(text.replace('"ANN401",', ""))
    strict = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(config), "--select", "ANN", "."],
        cwd=example,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "ANN401" in strict.stdout, strict.stdout + strict.stderr
    assert "audiogate_toyvoice/prompt.py" in strict.stdout
