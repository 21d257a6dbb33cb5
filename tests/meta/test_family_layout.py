"""Every shipped family package has the same file map (issue 19), so that the same
question ("where are Gemma 3n's frames counted?") leads to the same module in each.

Required modules and their meanings are listed in each package's ``__init__`` docstring,
one line per module (``* ``name``: ...``); a family-specific extra module is allowed only
when that docstring names it too. ``plugin.py`` holds hook implementations only. A family
whose features come from a shared frontend (``audiogate.dsp.whisper``) has no kernel
modules of its own; one that has them lists them as the others do.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from shipped import shipped_families

#: The family packages this repository ships (families.toml; their entry points are
#: checked in test_distributions).
SHIPPED = tuple(dict.fromkeys(family.package for family in shipped_families()))

#: The file map: module name → what it holds.
REQUIRED = {
    "policy": "pinned policy constants, checkpoint keys, spec(), policy parsing",
    "geometry": "samples → frames → tokens: the one function for token counts and shapes",
    "resample": "plan_resample / resample, every variant branch inside",
    "features": "plan_features / extract_features",
    "collate": "collate_features(policy, clips), numpy or MLX",
    "prompt": "expand_prompt",
    "plugin": "the hook implementations only",
    "__init__": "the package docstring with this map",
    "_version": "the version",
}
#: A family's own kernel, absent where its features come from a shared frontend.
KERNEL = {
    "melbank": "the family's mel bank, built with audiogate.dsp.melbank",
    "logmel": "the numpy log-mel kernel (blocked, with scratch buffers)",
    "mlx_logmel": "the MLX kernel, imported only for feature_backend='mlx'",
}
#: Stage entry points, by module.
ENTRY_POINTS = {
    "resample": ("plan_resample", "resample"),
    "features": ("plan_features", "extract_features"),
    "collate": ("collate_features",),
    "prompt": ("expand_prompt",),
    "policy": ("spec",),
}


def _package_dir(package: str) -> Path:
    module = importlib.import_module(package)
    assert module.__file__ is not None
    return Path(module.__file__).parent


def _docstring(package: str) -> str:
    return importlib.import_module(package).__doc__ or ""


@pytest.mark.parametrize("package", SHIPPED)
def test_the_file_map_is_complete(package: str) -> None:
    directory = _package_dir(package)
    present = {path.stem for path in directory.glob("*.py")}
    assert set(REQUIRED) <= present, f"{package} lacks {sorted(set(REQUIRED) - present)}"
    assert (directory / "schema.json").is_file()
    assert (directory / "py.typed").is_file()


@pytest.mark.parametrize("package", SHIPPED)
def test_no_module_outside_the_map_unless_the_docstring_names_it(package: str) -> None:
    doc = _docstring(package)
    present = {path.stem for path in _package_dir(package).glob("*.py")}
    extra = sorted(
        name for name in present - set(REQUIRED) - set(KERNEL) if f"``{name}``" not in doc
    )
    assert not extra, f"{package} has modules outside the file map: {extra}"
    assert not [
        p for p in _package_dir(package).iterdir() if p.is_dir() and p.name != "__pycache__"
    ]


@pytest.mark.parametrize("package", SHIPPED)
def test_the_docstring_lists_the_map_one_line_per_module(package: str) -> None:
    doc = _docstring(package)
    present = {path.stem for path in _package_dir(package).glob("*.py")}
    for name in (set(REQUIRED) | (set(KERNEL) & present)) - {"__init__", "_version"}:
        lines = [line for line in doc.splitlines() if line.startswith(f"* ``{name}``: ")]
        assert len(lines) == 1, f"{package}'s docstring has no line `* ``{name}``: ...`"


@pytest.mark.parametrize("package", SHIPPED)
def test_stage_modules_have_their_entry_points(package: str) -> None:
    for module, names in ENTRY_POINTS.items():
        loaded = importlib.import_module(f"{package}.{module}")
        missing = [name for name in names if not callable(getattr(loaded, name, None))]
        assert not missing, f"{package}.{module} lacks {missing}"


@pytest.mark.parametrize("package", SHIPPED)
def test_plugin_defines_only_hook_implementations(package: str) -> None:
    tree = ast.parse((_package_dir(package) / "plugin.py").read_text("utf-8"))
    for index, node in enumerate(tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the module docstring
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign) and [
            getattr(target, "id", None) for target in node.targets
        ] == ["__all__"]:
            continue
        if isinstance(node, ast.FunctionDef) and node.name.startswith("audiogate_"):
            decorators = [ast.unparse(d) for d in node.decorator_list]
            assert any(d.startswith("hookimpl") for d in decorators), node.name
            continue
        pytest.fail(f"{package}/plugin.py line {node.lineno}: not a hook implementation")


def test_the_mlx_kernel_is_imported_only_on_demand() -> None:
    import subprocess
    import sys

    code = (
        "import sys; "
        + "; ".join(f"import {p}.plugin" for p in SHIPPED)
        + "; print(sorted(m for m in sys.modules if m.endswith('.mlx_logmel') or m == 'mlx'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
