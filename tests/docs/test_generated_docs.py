"""The documentation is fresh and whole: generated pages match the code (tox's schema
freshness test, applied to docs), links resolve, and every page is reachable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
READMES = sorted((ROOT / "examples").rglob("README.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def test_generated_reference_pages_are_fresh(gen_docs, capsys) -> None:
    assert gen_docs.main(["--check"]) == 0, capsys.readouterr().err


def test_check_mode_fails_on_a_stale_or_orphaned_page(gen_docs, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gen_docs, "REFERENCE", tmp_path)
    assert gen_docs.main([]) == 0
    assert gen_docs.main(["--check"]) == 0
    hooks = tmp_path / "hooks.md"
    hooks.write_text(hooks.read_text("utf-8").replace("audiogate_resample", "resample"), "utf-8")
    (tmp_path / "policy-keys-gone.md").write_text("# a family that is no longer shipped\n")
    assert gen_docs.main(["--check"]) == 1
    assert gen_docs.main([]) == 0
    assert not (tmp_path / "policy-keys-gone.md").exists()
    assert gen_docs.main(["--check"]) == 0


def test_the_hook_reference_documents_every_parameter(gen_docs) -> None:
    text = (DOCS / "reference" / "hooks.md").read_text("utf-8")
    for _stage, name, function, _firstresult in gen_docs.hook_specs():
        section = text.split(f'<a id="{name}"></a>')[1].split("<a id=")[0]
        for parameter in function.__code__.co_varnames[: function.__code__.co_argcount]:
            assert f"| `{parameter}` |" in section, (name, parameter)


def test_error_templates_show_the_fields_of_the_message(gen_docs) -> None:
    text = (DOCS / "reference" / "errors.md").read_text("utf-8")
    assert (
        "`audio {limit} limit exceeded (clip {clip_index + 1}): actual {actual}, maximum {maximum}`"
        in text
    )
    assert "| `queue_full` | [`QueueFullError`](#queuefullerror) | `queue_full` | 429 | 2 |" in text


def _slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text("utf-8")
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", text), flags=re.MULTILINE)
    return ids | {_slug(h) for h in headings}


@pytest.mark.parametrize("page", PAGES + READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text("utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no such anchor")
    assert not broken, broken


def test_the_index_links_every_page() -> None:
    # The families' policy-key pages are linked from the generated families page.
    index = DOCS / "index.md"
    families = DOCS / "reference" / "family-list.md"
    linked = {
        (DOCS / t.partition("#")[0]).resolve() for t in LINK.findall(index.read_text("utf-8"))
    } | {
        (families.parent / t.partition("#")[0]).resolve()
        for t in LINK.findall(families.read_text("utf-8"))
    }
    missing = [str(p.relative_to(DOCS)) for p in PAGES if p != index and p.resolve() not in linked]
    assert not missing, f"docs/index.md does not link {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_quoted_code_is_verbatim(run_tutorial, page: Path) -> None:
    assert run_tutorial.stale_excerpts(page.read_text("utf-8")) == []
