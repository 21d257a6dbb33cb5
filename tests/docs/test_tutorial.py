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
