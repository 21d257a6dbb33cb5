"""Meta-tests (datasette's pattern): the plugin surface stays tested and documented.

Every hook specification must have a ``test_hook_<name>`` test somewhere under
``tests/``, a docstring in the house template (summary; the results sentence that matches
its ``firstresult`` option; ``:param:`` for each parameter, in order; ``:returns:``),
full annotations, a typed façade method on :class:`~audiogate.host.FamilyHost`, and its
signature in ``docs/reference/hooks.md``. Adding a hook without these fails the suite.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from audiogate import hookspecs
from audiogate.host import FamilyHost, create_host

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
HOOKS_MD = ROOT / "docs" / "reference" / "hooks.md"

FIRSTRESULT = "first non-``None`` result wins"
ALL_RESULTS = "results are ignored"


def hook_specs(module: Any = hookspecs) -> dict[str, tuple[Callable[..., Any], bool]]:
    """``{name: (function, firstresult)}`` of every hook specification in ``module``."""
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {
        name: (function, bool(getattr(function, marker).get("firstresult")))
        for name, function in vars(module).items()
        if callable(function) and hasattr(function, marker)
    }


def docstring_problems(function: Callable[..., Any], firstresult: bool) -> list[str]:
    """How a hook specification breaks the documentation template (empty if it does not)."""
    doc = inspect.getdoc(function) or ""
    problems = []
    if not doc or not doc.splitlines()[0].strip().endswith("."):
        problems.append("no one-line summary ending in a full stop")
    sentence = FIRSTRESULT if firstresult else ALL_RESULTS
    if sentence not in doc:
        problems.append(f"no {sentence!r} sentence (firstresult={firstresult})")
    if (ALL_RESULTS if firstresult else FIRSTRESULT) in doc:
        problems.append("the results sentence contradicts the firstresult option")
    signature = inspect.signature(function)
    documented = re.findall(r"^:param (\w+):", doc, flags=re.MULTILINE)
    if documented != list(signature.parameters):
        problems.append(f":param fields {documented} != parameters {list(signature.parameters)}")
    if not re.search(r"^:returns:", doc, flags=re.MULTILINE):
        problems.append("no :returns: field")
    unannotated = [
        p.name for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty
    ]
    if unannotated:
        problems.append(f"parameters without annotations: {unannotated}")
    if signature.return_annotation is inspect.Signature.empty:
        problems.append("no return annotation")
    return problems


def hook_tests() -> set[str]:
    """Names of every ``test_hook_*`` function under ``tests/``."""
    found = set()
    for path in TESTS.rglob("test_*.py"):
        found.update(re.findall(r"^def (test_hook_\w+)\(", path.read_text("utf-8"), re.MULTILINE))
    return found


HOOKS = hook_specs()


def test_the_hook_list_is_the_hosts() -> None:
    host = create_host(load_entry_points=False)
    assert sorted(HOOKS) == host.hook_names()
    assert len(HOOKS) == 9


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_has_a_test(name: str) -> None:
    assert f"test_hook_{name}" in hook_tests(), (
        f"write test_hook_{name} (tests/core/test_hooks.py has one per hook)"
    )


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_has_a_documented_signature(name: str) -> None:
    function, firstresult = HOOKS[name]
    assert docstring_problems(function, firstresult) == []


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_in_the_generated_reference(name: str) -> None:
    function, _ = HOOKS[name]
    call = f"{name}({', '.join(inspect.signature(function).parameters)})"
    assert f"## `{call}`" in HOOKS_MD.read_text("utf-8"), "run: python scripts/gen_docs.py"


@pytest.mark.parametrize("name", sorted(set(HOOKS) - {"audiogate_register_families"}))
def test_every_stage_hook_has_a_typed_facade_method(name: str) -> None:
    function, _ = HOOKS[name]
    method = getattr(FamilyHost, name.removeprefix("audiogate_"), None)
    assert method is not None, f"FamilyHost.{name.removeprefix('audiogate_')} is missing"
    facade = inspect.signature(method)
    assert facade.return_annotation is not inspect.Signature.empty
    assert [p for p in facade.parameters if p != "self"] == list(
        inspect.signature(function).parameters
    )


# --- the checks themselves fail when they should ---------------------------------------


def test_the_template_check_catches_a_careless_hook() -> None:
    def audiogate_frob_widget(widget, depth: int):  # type: ignore[no-untyped-def]
        """frobs a widget

        :param widget: the widget.
        """

    problems = docstring_problems(audiogate_frob_widget, firstresult=True)
    assert any("summary" in p for p in problems)
    assert any("first non-``None`` result wins" in p for p in problems)
    assert any(":param fields ['widget']" in p for p in problems)
    assert any(":returns:" in p for p in problems)
    assert any("annotations: ['widget']" in p for p in problems)
    assert any("return annotation" in p for p in problems)


def test_a_new_hook_without_a_test_is_noticed() -> None:
    import types

    module = types.ModuleType("fake_hookspecs")

    @hookspecs.hookspec
    def audiogate_frob_widget(widget: int) -> None:
        """Frob a widget.

        Every implementation is called; results are ignored.

        :param widget: the widget.
        :returns: nothing.
        """

    module.audiogate_frob_widget = audiogate_frob_widget  # type: ignore[attr-defined]
    (name,) = hook_specs(module)
    assert f"test_hook_{name}" not in hook_tests()
    assert docstring_problems(audiogate_frob_widget, firstresult=False) == []
