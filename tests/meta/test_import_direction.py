"""The one-way flow of ``docs/architecture.md`` holds in the imports.

Data flows acquire → admit → decode → resample → features → expand; each stage takes
what an earlier one made. In the imports that means: a stage's modules never import a
later stage's (nor the gate, the worker, the server or the CLI that drive them all), so
that a record lives with the stage that makes it and an earlier stage cannot reach into
a later one. The rule is read from the source (``ast``), not from what happens to be
imported at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"

#: The stages in flow order, and the modules (dotted prefixes) each consists of; the
#: longest prefix names a module's stage. ``audiogate.pipeline`` itself re-exports the
#: records of admission and processing, so it counts as its latest stage.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("acquire", ("audiogate.acquire",)),
    ("admit", ("audiogate.pipeline.preflight", "audiogate.pipeline.plans")),
    ("decode", ("audiogate.decode",)),
    ("resample", ("audiogate.resample",)),
    (
        "features",
        ("audiogate.pipeline", "audiogate.pipeline.process", "audiogate.pipeline.prepared"),
    ),
    ("expand", ("audiogate.chat",)),
)

#: What drives the stages: no stage imports it. The source store is stage-neutral (its
#: records, backend and leases import no stage, see below) but no stage imports it
#: either: acquisition resolves ``audio_ref`` parts through its own protocol
#: (``acquire/refs.py``), and the store's admission drives acquire and the preflight.
DRIVERS = (
    "audiogate.api",
    "audiogate.worker",
    "audiogate.server",
    "audiogate.cli",
    "audiogate.store",
    "audiogate.streaming",
)

#: The store's one module that drives stages (admitting an upload as inline audio is).
STORE_DRIVER = "audiogate.store.admission"

#: Vocabulary every stage may name: what a clip's header says (formats, geometry,
#: limits), made by no stage in particular.
SHARED = ("audiogate.decode.geometry",)

#: Imports of a later stage that the architecture itself describes, and why.
ALLOWED = {
    # docs/architecture.md: admission is pipeline/preflight.py *and* decode.inspect(),
    # which reads a clip's header without decoding a sample.
    ("admit", "audiogate.decode"): "admission reads each clip's header with decode.inspect()",
    ("admit", "audiogate.decode.samples"): "the decode block size the working set is planned by",
}

ORDER = {name: index for index, (name, _) in enumerate(STAGES)}


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def stage_of(module: str) -> str | None:
    """The stage ``module`` belongs to (``None``: no stage)."""
    best: tuple[int, str] | None = None
    for name, prefixes in STAGES:
        for prefix in prefixes:
            if _matches(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return None if best is None else best[1]


def _imported(tree: ast.Module, module: str, *, package: bool) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``tree`` (relative ones resolved)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if package else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            for alias in node.names:
                # ``from audiogate import decode`` imports a module; ``from x import Name``
                # a name of ``x``: the longer form is the module when it is one.
                found.append((node.lineno, f"{base}.{alias.name}"))
    return found


def violations(module: str, source: str, *, package: bool = False) -> list[str]:
    """Why ``module`` (of ``source``) breaks the flow; empty if it does not."""
    stage = stage_of(module)
    if stage is None:
        return []
    out = []
    for line, name in _imported(ast.parse(source), module, package=package):
        if not name.startswith("audiogate"):
            continue
        if any(_matches(name, shared) for shared in SHARED):
            continue
        if any(_matches(name, driver) for driver in DRIVERS):
            out.append(f"{module}:{line} ({stage}) imports {name}, which drives the stages")
            continue
        # ``from pkg import Name`` imports from ``pkg`` unless ``pkg.Name`` is a module.
        checked = name if _is_module(name) else name.rpartition(".")[0]
        target = stage_of(checked)
        if target is None or ORDER[target] <= ORDER[stage] or (stage, checked) in ALLOWED:
            continue
        out.append(f"{module}:{line} ({stage}) imports {checked} of a later stage ({target})")
    return out


def _is_module(name: str) -> bool:
    path = CORE.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _stage_modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted((CORE / "audiogate").rglob("*.py")):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if stage_of(name) is not None:
            modules.append((name, path))
    return modules


MODULES = _stage_modules()


def test_every_stage_has_modules() -> None:
    found = {stage_of(name) for name, _ in MODULES}
    assert found == set(ORDER), f"stages without modules: {set(ORDER) - found}"


@pytest.mark.parametrize(("name", "path"), MODULES, ids=[name for name, _ in MODULES])
def test_no_stage_imports_a_later_one(name: str, path: Path) -> None:
    package = path.name == "__init__.py"
    assert violations(name, path.read_text(encoding="utf-8"), package=package) == []


def _store_modules() -> list[tuple[str, Path]]:
    modules = []
    for path in sorted((CORE / "audiogate" / "store").rglob("*.py")):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules.append((".".join(parts), path))
    return modules


STORE_MODULES = _store_modules()


def test_the_store_exists() -> None:
    assert STORE_DRIVER in dict(STORE_MODULES)


@pytest.mark.parametrize(("name", "path"), STORE_MODULES, ids=[name for name, _ in STORE_MODULES])
def test_the_store_imports_no_stage_outside_its_admission(name: str, path: Path) -> None:
    if name == STORE_DRIVER:
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = _imported(tree, name, package=path.name == "__init__.py")
    staged = [
        (line, imported)
        for line, imported in found
        if imported.startswith("audiogate")
        and not any(_matches(imported, shared) for shared in SHARED)
        and stage_of(imported if _is_module(imported) else imported.rpartition(".")[0])
    ]
    assert staged == [], f"{name} imports stage modules: {staged}"


@pytest.mark.parametrize(
    ("module", "source"),
    [
        # What acquire/acquire.py once did: stage 1 reaching into the pipeline's records.
        ("audiogate.acquire.acquire", "from audiogate.pipeline.records import EncodedClip"),
        ("audiogate.acquire.acquire", "from audiogate.pipeline import EncodedClip"),
        ("audiogate.decode.decoder", "import audiogate.resample.soxr_hq"),
        ("audiogate.pipeline.preflight", "from audiogate.chat import parse_rendered"),
        ("audiogate.chat.messages", "from audiogate.worker import AudioWorker"),
        ("audiogate.acquire.parts", "from audiogate.store import SourceStore"),
        ("audiogate.acquire.context", "from ..pipeline import batch"),
    ],
)
def test_the_check_sees_a_stage_reaching_forward(module: str, source: str) -> None:
    assert violations(module, source)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("audiogate.pipeline.process", "from audiogate.acquire.clip import EncodedClip"),
        ("audiogate.acquire.clip", "from audiogate.decode.geometry import WAV"),
        ("audiogate.pipeline.preflight", "from audiogate.decode import inspect"),
        ("audiogate.chat.sentinels", "from audiogate.records import MediaSegment"),
    ],
)
def test_the_check_lets_a_stage_use_earlier_ones_and_the_vocabulary(
    module: str, source: str
) -> None:
    assert violations(module, source) == []
