"""Run the plugin tutorial's commands exactly as written, and check its code excerpts.

``docs/plugins/tutorial.md`` marks what is executable with HTML comments:

* ``<!-- tutorial:run -->`` before a ```` ```console ```` block: each ``$ `` line is a
  command (a trailing ``\\`` continues it); the lines after it are its expected output,
  matched in order as a subsequence of the real output with whitespace runs collapsed,
  where ``...`` inside a line matches anything and a line of just ``...`` marks elided
  lines. A command that exits non-zero fails the run.
* ``<!-- tutorial:excerpt PATH -->`` before a code block: the block must appear verbatim
  in ``PATH`` (relative to the repository root), so the tutorial cannot drift from the
  example plugin it describes.

The commands run from the repository root in a fresh virtual environment that sees
every package of the current one (a ``.pth`` file adds its site-packages) but installs
into its own, so installing the example plugin leaves the current environment as it
was. ``audiogate`` on that environment's ``PATH`` runs its own interpreter.

Usage: ``python scripts/run_tutorial.py [--keep]`` (exit 1 on the first failure).
``tests/docs/test_tutorial.py`` runs it in CI.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
TUTORIAL: Final = ROOT / "docs" / "plugins" / "tutorial.md"

_MARK: Final = re.compile(r"^<!--\s*tutorial:(run|excerpt)\s*(\S*)\s*-->\s*$")
_FENCE: Final = re.compile(r"^(```+)\s*(\w*)\s*$")
_PROMPT: Final = "$ "


@dataclass
class Command:
    """One command of a run block and the output the tutorial shows for it."""

    line: int
    text: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Excerpt:
    """A code block that must appear verbatim in ``path``."""

    line: int
    path: str
    code: str


def _blocks(markdown: str) -> Iterator[tuple[str, str, int, list[str]]]:
    """``(kind, argument, line, block lines)`` for each marked fenced block."""
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        mark = _MARK.match(lines[index].strip())
        index += 1
        if mark is None:
            continue
        while index < len(lines) and not lines[index].strip():
            index += 1
        fence = _FENCE.match(lines[index]) if index < len(lines) else None
        if fence is None:
            raise ValueError(f"tutorial line {index}: a tutorial mark must precede a code block")
        start = index + 1
        end = start
        while end < len(lines) and lines[end].strip() != fence.group(1):
            end += 1
        if end == len(lines):
            raise ValueError(f"tutorial line {start}: unterminated code block")
        yield mark.group(1), mark.group(2), start + 1, lines[start:end]
        index = end + 1


def run_blocks(markdown: str) -> list[list[Command]]:
    """The commands of every ``tutorial:run`` block, in order."""
    blocks: list[list[Command]] = []
    for kind, _argument, line, body in _blocks(markdown):
        if kind != "run":
            continue
        commands: list[Command] = []
        continuing = False
        for offset, text in enumerate(body):
            if continuing:
                commands[-1].text += "\n" + text
            elif text.startswith(_PROMPT):
                commands.append(Command(line + offset, text[len(_PROMPT) :]))
            elif commands:
                commands[-1].expected.append(text)
            elif text.strip():
                raise ValueError(f"tutorial line {line + offset}: output before any command")
            continuing = bool(commands) and text.endswith("\\") and not commands[-1].expected
        blocks.append(commands)
    return blocks


def excerpts(markdown: str) -> list[Excerpt]:
    """The ``tutorial:excerpt`` blocks."""
    return [
        Excerpt(line, argument, "\n".join(body))
        for kind, argument, line, body in _blocks(markdown)
        if kind == "excerpt"
    ]


def stale_excerpts(markdown: str, root: Path = ROOT) -> list[str]:
    """Excerpts that do not appear verbatim in their file (with the reason)."""
    problems = []
    for excerpt in excerpts(markdown):
        path = root / excerpt.path
        if not path.is_file():
            problems.append(f"tutorial line {excerpt.line}: {excerpt.path} does not exist")
        elif excerpt.code not in path.read_text("utf-8"):
            problems.append(
                f"tutorial line {excerpt.line}: the excerpt is not in {excerpt.path} any more; "
                f"copy the current code into the tutorial"
            )
    return problems


def _normalize(text: str) -> str:
    return " ".join(text.split())


def output_matches(expected: Sequence[str], actual: str) -> str | None:
    """``None`` if the expected lines occur in order in ``actual``; else the first missing one."""
    lines = [_normalize(line) for line in actual.splitlines()]
    position = 0
    for wanted in expected:
        shown = _normalize(wanted)
        if shown in {"", "..."}:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in shown.split("...")))
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            return wanted
        position += 1
    return None


def make_environment(directory: Path) -> dict[str, str]:
    """A virtual environment in ``directory`` layered over the current one; its ``os.environ``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    python = directory / ("Scripts" if os.name == "nt" else "bin") / "python"
    child_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parents = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    # ``site.addsitedir`` (not a bare path line) so the parent's own .pth files, which
    # hold its editable installs, are processed too.
    Path(child_site, "_audiogate_tutorial_parent.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in parents), "utf-8"
    )
    script = python.parent / "audiogate"
    script.write_text(
        f"#!{python}\nimport sys\nfrom audiogate.cli import main\nsys.exit(main())\n", "utf-8"
    )
    script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONHOME", "PYTHONPATH"}}
    env["VIRTUAL_ENV"] = str(directory)
    env["PATH"] = str(python.parent) + os.pathsep + env.get("PATH", "")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def run_tutorial(directory: Path, *, markdown: str | None = None) -> list[str]:
    """Run every tutorial command in a fresh environment under ``directory``.

    :returns: problems (empty when every command succeeded with the shown output).
    """
    text = markdown if markdown is not None else TUTORIAL.read_text("utf-8")
    problems = stale_excerpts(text)
    if problems:
        return problems
    env = make_environment(directory / "venv")
    for block in run_blocks(text):
        for command in block:
            result = subprocess.run(
                ["bash", "-c", f"set -o pipefail\n{command.text}"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            output = result.stdout + result.stderr
            where = f"tutorial line {command.line}: $ {command.text}"
            if result.returncode != 0:
                return [f"{where}\nexited {result.returncode}:\n{textwrap.indent(output, '    ')}"]
            missing = output_matches(command.expected, output)
            if missing is not None:
                return [
                    f"{where}\nthe output lacks the line the tutorial shows:\n    {missing}\n"
                    f"it was:\n{textwrap.indent(output, '    ')}"
                ]
    return []


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tutorial; print problems; exit 1 if there are any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary environment")
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="audiogate-tutorial-"))
    try:
        problems = run_tutorial(directory)
    finally:
        if args.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print("the tutorial ran as written")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
