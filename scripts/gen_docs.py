"""Generate the reference pages under ``docs/reference/`` from the code.

* ``hooks.md`` from the hook specifications (signatures and docstrings);
* ``policy-keys-<family>.md`` from each shipped family's key table and pinned policy;
* ``errors.md`` from :mod:`audiogate.errors` (and the server's status mapping);
* ``metrics.md`` from :class:`audiogate.metrics.AudioMetrics` (and the server's series);
* ``cli.md`` from :func:`audiogate.cli.build_parser` (every subcommand's help).

Usage: ``python scripts/gen_docs.py`` rewrites the pages; ``--check`` writes nothing and
exits 1 when a committed page differs from what the code generates (a test runs it, as
tox checks its schema). Run it with the project's environment (Python 3.11): argparse's
help layout differs between Python versions.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from shipped import shipped_families

ROOT: Final = Path(__file__).resolve().parent.parent
REFERENCE: Final = ROOT / "docs" / "reference"
#: The families whose key reference is generated (installed plugins vary; these ship:
#: families.toml).
SHIPPED_FAMILIES: Final = tuple(family.name for family in shipped_families())
HELP_COLUMNS: Final = "100"
COMMAND: Final = "python scripts/gen_docs.py"


def _header(title: str, source: str) -> list[str]:
    return [
        f"# {title}",
        "",
        f"<!-- Generated from {source} by `{COMMAND}`; do not edit by hand. -->",
        "",
    ]


def _cell(value: object) -> str:
    """A Markdown table cell: pipes escaped, newlines folded."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _code(value: object) -> str:
    text = str(value).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


# --- docstrings ----------------------------------------------------------------------

_FIELD: Final = re.compile(r"^:(param|returns|raises)\s*([\w.]*)\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, list[tuple[str, str, str]]]:
    """``(prose, [(field, name, text)])`` of a reST-field docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    prose: list[str] = []
    fields: list[tuple[str, str, str]] = []
    for line in lines:
        match = _FIELD.match(line.strip())
        if match:
            fields.append((match.group(1), match.group(2), match.group(3)))
        elif fields and line.startswith(" "):
            kind, name, text = fields[-1]
            fields[-1] = (kind, name, f"{text} {line.strip()}")
        elif not fields:
            prose.append(line)
    return "\n".join(prose).strip(), fields


def _rst_to_md(text: str) -> str:
    """The little reST the docstrings use, as Markdown."""
    text = re.sub(r":(?:func|class|meth|attr|data|mod):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


# --- hooks ---------------------------------------------------------------------------


def hook_specs() -> list[tuple[str, str, Callable[..., Any], bool]]:
    """``(stage, name, function, firstresult)`` of every hook, in definition order."""
    from audiogate import hookspecs

    source = inspect.getsource(hookspecs)
    stage = ""
    stages: dict[str, str] = {}
    for line in source.splitlines():
        banner = re.match(r"^# --- (\w[\w ]*\w) -+$", line)
        if banner:
            stage = banner.group(1)
        definition = re.match(r"^def (audiogate_\w+)\(", line)
        if definition:
            stages[definition.group(1)] = stage
    out = []
    for name, stage in stages.items():
        function = getattr(hookspecs, name)
        options = getattr(function, f"{hookspecs.PROJECT_NAME}_spec")
        out.append((stage, name, function, bool(options.get("firstresult"))))
    return out


def hook_call(name: str, function: Callable[..., Any]) -> str:
    """``name(a, b, c)``: the form the docs and the meta-tests look for."""
    return f"{name}({', '.join(inspect.signature(function).parameters)})"


def _typed_signature(name: str, function: Callable[..., Any]) -> str:
    signature = inspect.signature(function)
    params = ",\n".join(f"    {p.name}: {p.annotation}" for p in signature.parameters.values())
    return f"def {name}(\n{params},\n) -> {signature.return_annotation}: ..."


def gen_hooks() -> str:
    """``docs/reference/hooks.md``."""
    from audiogate import defaults, hookspecs
    from audiogate.host import FamilyHost

    specs = hook_specs()
    lines = _header("Hook reference", "`core/audiogate/hookspecs.py`")
    lines += [
        _rst_to_md(inspect.getdoc(hookspecs) or ""),
        "",
        "Implement a hook with `from audiogate import hookimpl`; declare only the parameters "
        "you use. The core's defaults live in `core/audiogate/defaults.py` and are "
        "registered with `trylast`, so a family's implementation always runs first. "
        "[Write a family plugin](../plugins/tutorial.md) walks through all of them.",
        "",
    ]
    rows = []
    for stage, name, _function, firstresult in specs:
        rows.append(
            [
                f"[`{name}`](#{name})",
                stage,
                "first non-`None` wins" if firstresult else "every implementation",
                "yes" if hasattr(defaults, name) else "no",
            ]
        )
    lines += _table(["hook", "stage", "results", "core default"], rows)
    for stage, name, function, firstresult in specs:
        prose, fields = parse_docstring(function.__doc__ or "")
        lines += ["", f'<a id="{name}"></a>', "", f"## `{hook_call(name, function)}`", ""]
        facade = getattr(FamilyHost, name.removeprefix("audiogate_"), None)
        called = (
            f"Called through `FamilyHost.{facade.__name__}{inspect.signature(facade)}`"
            if facade is not None
            else "Called by `create_host()` once per plugin, with a `register` that names it"
        )
        called = called.replace("(self, ", "(")
        lines += [
            f"Stage: **{stage}**. "
            + ("`firstresult`: the first non-`None` result wins. " if firstresult else "")
            + ("The core has a default (`trylast`). " if hasattr(defaults, name) else "")
            + called.replace("'", "")
            + ".",
            "",
            # tests/docs/test_code_blocks.py runs every block; this one needs the marker.
            "<!-- doc-test setup: from audiogate.hookspecs import hookspec -->",
            "```python",
            "@hookspec" + ("(firstresult=True)" if firstresult else ""),
            _typed_signature(name, function),
            "```",
            "",
            _rst_to_md(prose),
            "",
        ]
        parameters = inspect.signature(function).parameters
        params = [(n, t) for kind, n, t in fields if kind == "param"]
        lines += _table(
            ["parameter", "type", "meaning"],
            [[_code(n), _code(parameters[n].annotation), _cell(_rst_to_md(t))] for n, t in params],
        )
        lines.append("")
        for kind, exc, text in fields:
            if kind == "returns":
                lines.append(f"**Returns** {_rst_to_md(text)}")
                lines.append("")
            elif kind == "raises":
                lines.append(f"**Raises** `{exc}`: {_rst_to_md(text)}")
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- policy keys ---------------------------------------------------------------------


def _allowed(key: Any) -> str:
    if key.has_const:
        return f"exactly {_code(repr(key.const))}"
    if key.enum is not None:
        return ", ".join(_code(repr(v)) for v in key.enum)
    if key.kind == "integer":
        low = 0 if key.minimum is None else key.minimum
        return f"{low} … {key.maximum}" if key.maximum is not None else f"≥ {low}"
    return f"any {key.kind}"


def _sets(key: Any) -> str:
    if key.apply == "cap_samples_by_seconds":
        what = "lowers `max_samples_per_clip` to value × target rate"
    elif key.has_const:
        what = f"confirms `{key.target}` (never changes it)"
    else:
        what = f"`{key.target}`"
    return f"{what}: {_cell(key.description)}" if key.description else what


def gen_families() -> str:
    """``docs/reference/family-list.md``: the shipped families (families.toml), one row each,
    linking each one's policy-key page (so the index links one page, not one per family)."""
    from audiogate.host import create_host

    host = create_host(load_entry_points=True)
    lines = _header("Families", "families.toml and each shipped family's registration")
    lines += [
        "The families this repository ships, in the order of `families.toml`; "
        "`audiogate families` lists the installed ones.",
        "",
    ]
    rows = []
    for family in SHIPPED_FAMILIES:
        registered = host.family(family)
        spec = registered.spec
        rows.append(
            [
                f"[{family}](policy-keys-{family}.md)",
                _code(registered.distribution),
                ", ".join(_code(t) for t in spec.model_types),
                _code(spec.revision),
                _cell(spec.summary),
            ]
        )
    lines += _table(
        ["family (policy keys)", "distribution", "model types", "revision", "summary"], rows
    )
    return "\n".join(lines).rstrip() + "\n"


def gen_policy_keys(family: str) -> str:
    """``docs/reference/policy-keys-<family>.md``."""
    from audiogate.host import create_host
    from audiogate.policy.checkpoint import PROCESSOR_CONFIGS
    from audiogate.policy.keys import LIMIT_NAMESPACES
    from audiogate.testing.checkpoints import pinned_value

    host = create_host(load_entry_points=True)
    registered = host.family(family)
    spec = registered.spec
    pinned = host.default_policy(family)
    lines = _header(
        f"Policy keys: {family}",
        f"the `{family}` family's key table and pinned policy",
    )
    lines += [
        f"{spec.summary}",
        "",
        *_table(
            ["", ""],
            [
                ["distribution", _code(registered.distribution)],
                ["model types", ", ".join(_code(t) for t in spec.model_types)],
                ["pinned revision", _code(spec.revision)],
                ["schema", f"`audiogate schema {family}` (JSON Schema draft 2020-12)"],
            ],
        ),
        "",
        "## Recognized keys",
        "",
        f"A checkpoint sets these in its processor file ({', '.join(PROCESSOR_CONFIGS)}), "
        "which shadows `config.json`: for each key, the first file that contains any of its "
        "paths wins, and within a file the first path listed. Bounds can only be lowered: "
        "each maximum is the family's pinned value. Keys with one allowed value confirm the "
        "frontend and change nothing; any other value fails model start-up with the file, "
        f"path, value and rule. Unknown keys are ignored, except inside "
        f"`{LIMIT_NAMESPACES[0]}` (a typo there is refused); `{LIMIT_NAMESPACES[1]}` is read "
        "as a second spelling of the same limits.",
        "",
    ]
    rows = []
    for key in spec.keys:
        rows.append(
            [
                "<br>".join(_code(p) for p in key.paths),
                key.kind,
                _allowed(key),
                _code(repr(pinned_value(key, pinned))),
                _sets(key),
            ]
        )
    lines += _table(["JSON paths", "type", "allowed", "pinned", "sets"], rows)
    lines += [
        "",
        "## Pinned policy",
        "",
        f"What a checkpoint that declares nothing gets (`audiogate policy --family {family}`).",
        "",
    ]
    values = pinned.as_dict()
    options = values.pop("options")
    rows = [[_code(k), _code(repr(v))] for k, v in values.items()]
    rows += [[_code(f"options.{k}"), _code(repr(v))] for k, v in options.items()]
    lines += _table(["field", "value"], rows)
    return "\n".join(lines).rstrip() + "\n"


# --- errors --------------------------------------------------------------------------


class _Slot(str):
    """A placeholder argument whose ``repr`` is itself, so templates read ``{name}``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _template(cls: type[BaseException]) -> tuple[str, BaseException | None]:
    init = cls.__init__
    if init is BaseException.__init__ or init is Exception.__init__:
        return "free text given by the raiser", None
    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    for param in list(inspect.signature(init).parameters.values())[1:]:
        value: Any = True if "bool" in str(param.annotation) else _Slot(f"{{{param.name}}}")
        if param.kind is param.POSITIONAL_OR_KEYWORD and param.default is param.empty:
            args.append(value)
        elif param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            kwargs[param.name] = value
    error = cls(*args, **kwargs)
    return str(error), error


def _error_classes() -> list[type[BaseException]]:
    """:mod:`audiogate.errors`' classes and the error classes other modules add (the
    server's, the batch rows', the decoder processes')."""
    from audiogate import errors
    from audiogate.batch.rows import BadRowError
    from audiogate.decode.isolation import DecoderFailedError
    from audiogate.server.errors import (
        BadRequestError,
        RequestTimeoutError,
        ServerConfigError,
        UnauthorizedError,
    )

    exported = (getattr(errors, n) for n in errors.__all__)
    classes: list[type[BaseException]] = [
        c for c in exported if isinstance(c, type) and issubclass(c, BaseException)
    ]
    classes += [
        DecoderFailedError,
        BadRequestError,
        RequestTimeoutError,
        UnauthorizedError,
        ServerConfigError,
        BadRowError,
    ]
    return classes


def _walk(
    root: type[BaseException], classes: Sequence[type[BaseException]], depth: int = 0
) -> Iterator[tuple[int, type[BaseException]]]:
    yield depth, root
    for cls in classes:
        if cls.__bases__[0] is root:
            yield from _walk(cls, classes, depth + 1)


_CODE_TERM: Final = re.compile(r"``\w+``(?: / ``\w+``)*")


def _decode_codes() -> list[tuple[str, str]]:
    """``(code, meaning)`` of every rule code the decoder's docstring documents."""
    from audiogate.decode import decoder

    doc = inspect.getdoc(decoder) or ""
    groups: list[tuple[list[str], str]] = []
    for line in doc.splitlines():
        if _CODE_TERM.fullmatch(line):
            groups.append((re.findall(r"``(\w+)``", line), ""))
        elif groups and line.startswith("    "):
            names, text = groups[-1]
            groups[-1] = (names, f"{text} {line.strip()}".strip())
    return [(name, text) for names, text in groups for name in names]


def _first_sentence(doc: str | None) -> str:
    prose, _ = parse_docstring(doc or "")
    text = " ".join(prose.split())
    match = re.match(r"(.+?\.)(?:\s+[A-Z]|$)", text)
    return _rst_to_md(match.group(1) if match else text)


def error_codes() -> list[tuple[str, type[BaseException] | None, BaseException | None, str]]:
    """Every error code once, in the hierarchy's order: ``(code, class, an instance or
    None, meaning)``; a decode rule's code follows :class:`~audiogate.errors.DecodeError`,
    and ``internal`` (any exception audiogate did not raise on purpose) comes last."""
    from audiogate import errors
    from audiogate.decode.isolation import DecoderFailedError

    classes = _error_classes()
    special: dict[str, type[errors.DecodeError]] = {
        "empty": errors.EmptyAudioError,
        "non_finite": errors.NonFiniteSampleError,
        "codecs_unavailable": errors.CodecsUnavailableError,
        "decoder_crashed": DecoderFailedError,
        "decoder_timeout": DecoderFailedError,
        "decoder_memory_limit": DecoderFailedError,
    }
    rows: dict[str, tuple[type[BaseException] | None, BaseException | None, str]] = {}
    for _depth, cls in _walk(errors.AudioGateError, classes):
        _template_text, instance = _template(cls)
        if instance is None:
            instance = cls("")
        code = str(getattr(cls, "code"))  # noqa: B009 - not on BaseException's type
        if errors.error_code(instance) != code:  # the code is a parameter (DecodeError)
            instance = cls("x", clip_index=0, code=code)
        rows.setdefault(code, (cls, instance, _first_sentence(cls.__doc__)))
        if cls is errors.DecodeError:
            for rule, meaning in _decode_codes():
                owner = special.get(rule, errors.DecodeError)
                example = errors.DecodeError("x", clip_index=0, code=rule)
                rows.setdefault(rule, (owner, example, _rst_to_md(meaning)))
    rows[errors.INTERNAL_CODE] = (
        None,
        None,
        "an exception audiogate did not raise on purpose (a bug; the details are logged)",
    )
    return [(code, cls, instance, meaning) for code, (cls, instance, meaning) in rows.items()]


def gen_errors() -> str:
    """``docs/reference/errors.md``."""
    from audiogate import errors
    from audiogate.cli import EXIT_INTERNAL, exit_code_for
    from audiogate.errors import PreprocessCancelled
    from audiogate.metrics import rejection_reason
    from audiogate.server.errors import status_for

    classes = _error_classes()
    lines = _header("Error catalogue", "`core/audiogate/errors.py`")
    lines += [
        _rst_to_md(inspect.getdoc(errors) or ""),
        "",
        "## Codes",
        "",
        "The one vocabulary: the **code** is the server's JSON `code`, the batch output's "
        "`error_code` and `audiogate.errors.error_code(error)`; the **metrics reason** is "
        "the `reason` label a rejection is counted under in "
        "`audiogate_audio_preprocess_rejections_total` ([metrics](metrics.md); a cancellation "
        "is counted by `audiogate_audio_preprocess_cancelled_total`); the "
        "**HTTP status** is what the reference server answers "
        "(`audiogate.server.errors.status_for`, see [the server](../server.md)); the "
        "**exit code** is the `audiogate` command's ([CLI](cli.md)). An exception that is "
        "not an audiogate error, raised inside a family plugin during a request, becomes a "
        "`PluginError` (`plugin`, `feature_panic`, 500).",
        "",
    ]
    rows = []
    for code, cls, instance, meaning in error_codes():
        if cls is None:
            error: BaseException = RuntimeError("bug")
            where = "any other exception"
        else:
            assert instance is not None
            error = instance
            where = f"[`{cls.__name__}`](#{cls.__name__.lower()})"
        exit_code = exit_code_for(error) if cls is not None else EXIT_INTERNAL
        if isinstance(error, PreprocessCancelled):
            reason = "none: counted as cancelled"
        else:
            reason = f"`{rejection_reason(error)}`"
        rows.append(
            [
                f"`{code}`",
                where,
                reason,
                str(status_for(error)),
                str(exit_code),
                _cell(meaning),
            ]
        )
    lines += _table(
        ["code", "class", "metrics reason", "HTTP status", "exit code", "meaning"], rows
    )
    lines += ["", "## Hierarchy", "", "```"]
    for depth, cls in _walk(errors.AudioGateError, classes):
        lines.append("    " * depth + cls.__name__)
    lines += ["```", "", "## Classes"]
    for _depth, cls in _walk(errors.AudioGateError, classes):
        template, instance = _template(cls)
        base = cls.__bases__[0].__name__
        prose, fields = parse_docstring(cls.__doc__ or "")
        lines += [
            "",
            f"### `{cls.__name__}`",
            "",
            f"`{cls.__module__}.{cls.__name__}`, subclass of `{base}`. {_rst_to_md(prose)}",
            "",
            f"Code: `{getattr(cls, 'code')}`. Message: "  # noqa: B009
            f"{_code(template) if instance is not None else template}",
            "",
        ]
        params = [(n, t) for kind, n, t in fields if kind == "param"]
        if params:
            lines += _table(
                ["attribute", "meaning"], [[_code(n), _cell(_rst_to_md(t))] for n, t in params]
            )
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- metrics -------------------------------------------------------------------------


def _metric_rows(registry: Any) -> list[list[str]]:
    rows = []
    for family in registry.collect():
        samples = sorted({s.name for s in family.samples if not s.name.endswith("_created")})
        labels = sorted({k for s in family.samples for k in s.labels})
        rows.append(
            [
                "<br>".join(_code(s) for s in samples),
                family.type,
                ", ".join(_code(label) for label in labels) or "—",
                _cell(family.documentation),
            ]
        )
    return rows


def gen_metrics() -> str:
    """``docs/reference/metrics.md``."""
    from audiogate import errors, metrics
    from audiogate.metrics import REJECTION_REASONS, AudioMetrics

    audio = AudioMetrics(families=["FAMILY"])
    lines = _header("Metrics reference", "`core/audiogate/metrics/`")
    lines += [
        _rst_to_md(inspect.getdoc(metrics) or ""),
        "",
        "`AudioMetrics(registry)` registers the series on your registry (a new private one "
        "by default); the bounded worker (`audiogate.worker.AudioWorker`) records into it. "
        "Counters are exported with the `_total` suffix (prometheus_client also exports a "
        "`_created` timestamp per counter unless `PROMETHEUS_DISABLE_CREATED_SERIES` is "
        "set).",
        "",
        "## Audio series",
        "",
    ]
    lines += _table(["series", "type", "labels", "meaning"], _metric_rows(audio.registry))
    by_reason: dict[str, list[str]] = {reason: [] for reason in REJECTION_REASONS}
    for _depth, cls in _walk(errors.AudioGateError, _error_classes()):
        reason = getattr(cls, "reason", "")
        if cls is not errors.PreprocessCancelled and reason in by_reason:
            by_reason[reason].append(f"`{cls.__name__}`")
    lines += [
        "",
        "## Rejection reasons",
        "",
        "The `reason` label of `audiogate_audio_preprocess_rejections_total`, in this "
        "order; every reason is exported at zero for every registered family. A cancelled "
        "request counts in `audiogate_audio_preprocess_cancelled_total` instead, and an "
        "exception that is not an audiogate error counts as `feature_panic`.",
        "",
    ]
    lines += _table(
        ["reason", "raised as"],
        [[f"`{r}`", ", ".join(c) or "—"] for r, c in by_reason.items()],
    )
    server_metrics: Any = None
    try:
        from audiogate.server.budgets import ServerMetrics
    except ImportError:  # pragma: no cover - the server dependencies are core dependencies
        pass
    else:
        server_metrics = ServerMetrics
    if server_metrics is not None:
        from prometheus_client import CollectorRegistry

        from audiogate.server.stream_upload import StreamMetrics

        registry = CollectorRegistry()
        served = AudioMetrics(registry)
        server_metrics(served)
        StreamMetrics(served)  # the streamed clips' series (docs/streaming.md)
        names = {f.name for f in audio.registry.collect()}
        server_rows = [
            row
            for row, family in zip(_metric_rows(registry), registry.collect(), strict=True)
            if family.name not in names
        ]
        lines += [
            "",
            "## Server series",
            "",
            "The reference server (`audiogate serve`, [server](../server.md)) adds these to "
            "the same registry:",
            "",
        ]
        lines += _table(["series", "type", "labels", "meaning"], server_rows)
    return "\n".join(lines).rstrip() + "\n"


# --- CLI -----------------------------------------------------------------------------


def gen_cli() -> str:
    """``docs/reference/cli.md``."""
    from audiogate import cli

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = cli.build_parser()
        main_help = parser.format_help()
        subparsers = next(
            action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
        )
        helps = {name: sub.format_help() for name, sub in subparsers.choices.items()}
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    lines = _header("CLI reference", "`audiogate.cli.build_parser()`")
    lines += [
        _rst_to_md(inspect.getdoc(cli) or ""),
        "",
        "[The error catalogue](errors.md) gives the exit code of every error class.",
        "",
        "## `audiogate`",
        "",
        "```",
        main_help.rstrip(),
        "```",
    ]
    for name, text in helps.items():
        lines += ["", f"## `audiogate {name}`", "", "```", text.rstrip(), "```"]
    return "\n".join(lines).rstrip() + "\n"


# --- driver --------------------------------------------------------------------------


def generate() -> dict[Path, str]:
    """Every generated page, by path."""
    pages = {
        REFERENCE / "hooks.md": gen_hooks(),
        REFERENCE / "errors.md": gen_errors(),
        REFERENCE / "metrics.md": gen_metrics(),
        REFERENCE / "cli.md": gen_cli(),
    }
    for family in SHIPPED_FAMILIES:
        pages[REFERENCE / f"policy-keys-{family}.md"] = gen_policy_keys(family)
    pages[REFERENCE / "family-list.md"] = gen_families()
    return pages


def stale_pages(pages: Mapping[Path, str]) -> list[Path]:
    """Generated pages whose committed text differs, and key pages of no shipped family."""
    stale = [p for p, text in pages.items() if not p.exists() or p.read_text("utf-8") != text]
    stale += sorted(p for p in REFERENCE.glob("policy-keys-*.md") if p not in pages)
    return stale


def _shown(path: Path) -> str:
    return os.path.relpath(path, ROOT)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the pages, or with ``--check`` report the stale ones."""
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is stale")
    args = parser.parse_args(argv)
    pages = generate()
    stale = stale_pages(pages)
    if args.check:
        if stale:
            names = ", ".join(_shown(p) for p in stale)
            print(f"stale: {names}; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    REFERENCE.mkdir(parents=True, exist_ok=True)
    for path in stale:
        if path in pages:
            path.write_text(pages[path], "utf-8")
            print(f"wrote {_shown(path)}")
        else:
            path.unlink()
            print(f"removed {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
