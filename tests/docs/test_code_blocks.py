"""Every code block in the docs runs: each ```` ```python ```` block of ``README.md`` and
``docs/**/*.md`` is executed, and each ``audiogate ...`` command of a ```` ```console ````
(or ``sh``) block parses.

A page's Python blocks run in order in one fresh interpreter (names flow from block to
block, as a reader would type them), in a scratch directory holding ``examples/`` and
``models/`` (the checkpoints' config files, ``examples/models``). Blocks are compiled
with ``from __future__ import annotations`` and may ``await`` at top level. The names a
block may assume without defining them are the stand-ins of :data:`PRELUDE`:
``wav_bytes`` (one second of a generated WAV clip), ``messages`` (a chat turn holding it),
``request`` (``{"messages": messages}``) and ``model`` (a stand-in whose ``generate`` and
call check that ``input_ids`` came). A page whose block imports an optional module that
is not installed here (MLX, Ray, pyarrow, torch) is skipped, naming it.

Markers, each on the line before the fence:

* ``<!-- tutorial:excerpt PATH -->``: the block is verbatim code of ``PATH``
  (``test_quoted_code_is_verbatim``), which that file's own tests run;
* ``<!-- doc-test setup: CODE -->`` or ``<!-- doc-test setup`` ... ``-->``: hidden code
  run before the block (an output directory to read, a server's answer to decode);
* ``<!-- not-run: REASON -->``: the block is not run. Few, and each says why
  (:data:`MAX_NOT_RUN`).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: The most blocks the docs may leave unrun (each with its reason).
MAX_NOT_RUN = 3
#: Optional modules a page may need; without them here, the page is skipped.
OPTIONAL = ("mlx", "ray", "pyarrow", "torch")

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->$")
_EXCERPT = re.compile(r"^<!--\s*tutorial:excerpt\s+\S+\s*-->$")
_SETUP_LINE = re.compile(r"^<!--\s*doc-test setup:\s*(.*?)\s*-->$")
_SETUP_OPEN = "<!-- doc-test setup"

#: The stand-ins every page's blocks may use (see the module docstring).
PRELUDE = '''
import base64 as _base64

from audiogate.testing.audio import tone as _tone, wav_bytes as _wav_bytes

wav_bytes = _wav_bytes(_tone(seconds=1.0), rate_hz=16_000)
messages = [
    {
        "role": "user",
        "content": [
            {
                "type": "input_audio",
                "input_audio": {"data": _base64.b64encode(wav_bytes).decode(), "format": "wav"},
            },
            {"type": "text", "text": "What is said?"},
        ],
    }
]
request = {"messages": messages}


class _StandInModel:
    """Takes what a model takes; checks the prompt came with its features."""

    def __init__(self):
        self.calls = []

    def __call__(self, *, input_ids, **inputs):
        assert len(input_ids) > 0 and inputs, "no input_ids or no features"
        self.calls.append(inputs)

    generate = __call__


model = _StandInModel()
'''

#: Runs the blocks of one page (a JSON list of {name, setup, code}).
RUNNER = """
import __future__, ast, asyncio, inspect, json, sys

FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | __future__.annotations.compiler_flag
namespace = {"__name__": "__main__"}


def run(source, name):
    code = compile(source, name, "exec", flags=FLAGS, dont_inherit=True)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


run(sys.argv[2], "<prelude>")
for block in json.loads(open(sys.argv[1], encoding="utf-8").read()):
    if block["setup"]:
        run(block["setup"], block["name"] + " (setup)")
    run(block["code"], block["name"])
    print("ran", block["name"], flush=True)
"""


@attrs.frozen
class Block:
    page: Path
    line: int
    language: str
    code: str
    setup: str
    not_run: str | None
    excerpt: bool

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with the markers before each."""
    lines = page.read_text("utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match or not match.group(2):
            index += 1
            continue
        _indent, language = match.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = textwrap.dedent("\n".join(lines[index + 1 : end]))
        setup, not_run, excerpt = _markers(lines, index)
        found.append(Block(page, index + 1, language, body + "\n", setup, not_run, excerpt))
        index = end + 1
    return found


def _markers(lines: list[str], fence: int) -> tuple[str, str | None, bool]:
    """(setup code, not-run reason, excerpt) from the comments right above ``fence``."""
    parts: list[str] = []
    not_run, excerpt = None, False
    cursor = fence - 1
    while cursor >= 0:
        line = lines[cursor].strip()
        if line == "-->":  # the end of a multi-line setup comment
            start = cursor - 1
            while start >= 0 and not lines[start].strip().startswith(_SETUP_OPEN):
                start -= 1
            if start < 0:
                break
            parts.insert(0, textwrap.dedent("\n".join(lines[start + 1 : cursor])))
            cursor = start - 1
            continue
        if match := _NOT_RUN.match(line):
            not_run = match.group(1)
        elif match := _SETUP_LINE.match(line):
            parts.insert(0, match.group(1))
        elif _EXCERPT.match(line):
            excerpt = True
        else:
            break
        cursor -= 1
    return "".join(part + "\n" for part in parts), not_run, excerpt


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]
PYTHON = [b for b in ALL_BLOCKS if b.language in ("python", "py")]


def test_the_docs_have_python_blocks_and_the_extraction_sees_them() -> None:
    assert len(PYTHON) > 20
    readme = [b for b in PYTHON if b.page.name == "README.md"]
    assert readme
    assert "prepare_async" in readme[0].code


def test_only_a_few_blocks_are_not_run_and_each_says_why() -> None:
    skipped = {b.name: b.not_run for b in PYTHON if b.not_run is not None}
    assert len(skipped) <= MAX_NOT_RUN, skipped
    assert all(reason and len(reason) > 15 for reason in skipped.values()), skipped


def _needs(code: str) -> list[str]:
    missing = []
    for name in OPTIONAL:
        if re.search(rf"^\s*(?:import|from)\s+{name}\b", code, re.MULTILINE):
            try:
                __import__(name)
            except ImportError:
                missing.append(name)
    return missing


RUN_PAGES = sorted(
    {b.page for b in PYTHON if b.not_run is None and not b.excerpt},
    key=lambda p: str(p),
)


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs(page: Path, tmp_path: Path) -> None:
    blocks = [b for b in PYTHON if b.page == page and b.not_run is None and not b.excerpt]
    missing = sorted({name for b in blocks for name in _needs(b.setup + b.code)})
    if missing:
        pytest.skip(f"{page.name} needs {', '.join(missing)}, not installed here")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "models").symlink_to(ROOT / "examples" / "models")
    spec = tmp_path / "blocks.json"
    spec.write_text(
        json.dumps([{"name": b.name, "setup": b.setup, "code": b.code} for b in blocks]), "utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(spec), PRELUDE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    assert done.stdout.count("ran ") == len(blocks)


# --- console blocks ------------------------------------------------------------------


def _commands(block: Block) -> list[str]:
    """The ``audiogate ...`` command lines of a shell block (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", block.code)
    commands = []
    for raw in text.splitlines():
        line = raw.strip().removeprefix("$ ")
        line = line.split(" #", 1)[0].split(" | ", 1)[0].strip()
        words = shlex.split(line) if line else []
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
            words.pop(0)  # an environment assignment
        if words and words[0].rsplit("/", 1)[-1] == "audiogate":
            commands.append(shlex.join(words[1:]))
    return commands


CONSOLE = [
    (b, command)
    for b in ALL_BLOCKS
    if b.language in ("console", "sh", "bash", "shell")
    for command in _commands(b)
]


def test_the_docs_show_audiogate_commands() -> None:
    assert len(CONSOLE) > 10


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for word in words:
        if word.startswith("-"):
            continue
        for action in actions:
            if word in action.choices:
                return _subparser(action.choices[word], words[words.index(word) + 1 :])
        break
    return parser


@pytest.mark.parametrize(
    ("block", "command"), CONSOLE, ids=[f"{b.name}:{c[:40]}" for b, c in CONSOLE]
)
def test_every_audiogate_command_parses(block: Block, command: str) -> None:
    from audiogate.cli import build_parser

    parser = build_parser()
    words = shlex.split(command)
    sub = _subparser(parser, words)
    assert sub is not parser, f"{block.name}: no subcommand in {command!r}"
    unknown = [
        word.split("=", 1)[0]
        for word in words
        if word.startswith("--") and word.split("=", 1)[0] not in sub._option_string_actions
    ]
    assert unknown == [], f"{block.name}: {command!r} has unknown flags"
    if "..." in words:
        return  # an elided command: its flags are checked, not its completeness
    code: object = 0
    try:
        parser.parse_args(words)
    except SystemExit as exc:  # --help exits 0; a usage error exits 2
        code = exc.code
    assert code == 0, f"{block.name}: {command!r} does not parse"
