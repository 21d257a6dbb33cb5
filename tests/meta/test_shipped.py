"""Shipping a family is its folder plus one line of ``families.toml`` (issue 30).

Everything that enumerates the shipped families reads that list: the Makefile's installs
and install inputs, pytest's collection of ``plugins/<dir>/tests``, mypy's and ruff's
package patterns, ``scripts/gen_docs.py`` and ``scripts/regen_schemas.py``, the
``model_dir`` fixture's model types, :mod:`audiogate.testing.tiny_models` (through the
installed entry points). These tests check that the list and ``plugins/`` agree, and that
each consumer follows the list rather than a copy of it.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from shipped import LIST, ROOT, shipped_families

FAMILIES = shipped_families()
DIRS = sorted({family.dir for family in FAMILIES})


def _make_dry_run(tmp_path: Path, families: Path = LIST) -> str:
    """``make -n install install-test`` for a venv that does not exist: the install commands."""
    result = subprocess.run(
        [
            "make",
            "-n",
            "install",
            "install-test",
            f"VENV={tmp_path / 'venv'}",
            f"FAMILIES={families}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def test_every_listed_family_has_an_installable_folder_with_tests() -> None:
    assert FAMILIES, "families.toml lists no family"
    for family in FAMILIES:
        assert (family.root / "pyproject.toml").is_file(), family
        assert (family.root / family.package / "__init__.py").is_file(), family
        assert family.tests.is_dir(), family


def test_every_plugins_folder_is_listed() -> None:
    folders = sorted(path.name for path in (ROOT / "plugins").iterdir() if path.is_dir())
    unlisted = sorted(set(folders) - set(DIRS))
    assert not unlisted, f"add a line to families.toml for plugins/{unlisted}"


def test_each_line_is_one_family_on_one_line() -> None:
    lines = [line for line in LIST.read_text("utf-8").splitlines() if line.startswith("  {")]
    assert len(lines) == len(FAMILIES)
    for line, family in zip(lines, FAMILIES, strict=True):
        assert f'name = "{family.name}"' in line


def test_the_listed_examples_exist() -> None:
    for family in FAMILIES:
        for example in family.examples:
            assert (ROOT / "examples" / "models" / example / "config.json").is_file(), example


def test_each_listed_family_is_an_installed_entry_point_of_its_package() -> None:
    points = {point.name: point for point in entry_points(group="audiogate.families")}
    for family in FAMILIES:
        assert family.name in points, f"{family.distribution} is not installed: make install"
        assert points[family.name].module.partition(".")[0] == family.package
        assert points[family.name].dist is not None
        assert points[family.name].dist.name == family.distribution


def test_the_makefile_installs_exactly_the_list(tmp_path: Path) -> None:
    commands = _make_dry_run(tmp_path)
    installs = [line for line in commands.splitlines() if " install " in line and "-e " in line]
    assert len(installs) == 2  # the runtime install and the test install
    for line in installs:
        assert sorted(re.findall(r"-e plugins/(\S+)", line)) == DIRS


def test_the_makefile_follows_a_changed_list(tmp_path: Path) -> None:
    # One line fewer is one install fewer: nothing else in the Makefile names a family.
    shorter = tmp_path / "families.toml"
    dropped = FAMILIES[-1]
    text = LIST.read_text("utf-8")
    shorter.write_text(
        "\n".join(line for line in text.splitlines() if f'name = "{dropped.name}"' not in line)
    )
    commands = _make_dry_run(tmp_path, shorter)
    named = set(re.findall(r"-e plugins/(\S+)", commands))
    assert named == {family.dir for family in FAMILIES if family.dir != dropped.dir}
    makefile = (ROOT / "Makefile").read_text("utf-8")
    for family in FAMILIES:
        assert f"plugins/{family.dir}" not in makefile


def test_a_listed_folder_that_cannot_install_yet_is_left_out_of_installs(tmp_path: Path) -> None:
    extra = tmp_path / "families.toml"
    extra.write_text(
        LIST.read_text("utf-8").replace(
            "families = [\n", 'families = [\n  { name = "notyet", dir = "notyet-folder" },\n'
        )
    )
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "shipped.py"), "--list", str(extra), "pip-args"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "notyet" not in out.stdout
    assert "skipping plugins/{notyet-folder}" in out.stderr


def test_pyproject_names_no_family() -> None:
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    config = tomllib.loads(text)
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests", "plugins"]
    assert "plugins/*/audiogate_*" in config["tool"]["mypy"]["files"]
    assert "audiogate_*" in config["tool"]["ruff"]["lint"]["isort"]["known-first-party"]
    for family in FAMILIES:
        assert family.package not in text
        assert f"plugins/{family.dir}" not in text


def test_the_scripts_read_the_list() -> None:
    # scripts/ is on pytest's pythonpath (pyproject), as it is on a script's sys.path.
    gen_docs = importlib.import_module("gen_docs")
    regen_schemas = importlib.import_module("regen_schemas")
    assert tuple(family.name for family in FAMILIES) == gen_docs.SHIPPED_FAMILIES
    assert [f.name for f in regen_schemas.FAMILIES] == [f.name for f in FAMILIES]


def test_the_model_dir_fixture_knows_every_family_with_an_example() -> None:
    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    root_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root_conftest)
    for family in FAMILIES:
        if family.examples:
            assert family.name in root_conftest.MODEL_TYPES, family.name


@pytest.mark.slow
def test_pytest_collects_the_tests_of_every_listed_family_and_no_other() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    collected = set(re.findall(r"^plugins/([^/]+)/tests/", out.stdout, flags=re.MULTILINE))
    assert collected == set(DIRS), out.stdout[-2000:]


def test_every_shipped_family_registers_its_stages_without_the_0x_hook_form() -> None:
    import warnings

    from audiogate.deprecation import AudioGateDeprecationWarning
    from audiogate.host import create_host

    with warnings.catch_warnings():
        warnings.simplefilter("error", AudioGateDeprecationWarning)
        host = create_host(load_entry_points=True)
    for family in FAMILIES:
        stages = host.implementations(family.name)
        assert "audiogate_extract_features" in stages, family.name
        plugin = (family.root / family.package / "plugin.py").read_text("utf-8")
        assert "policy.family" not in plugin, f"{family.name}: the host dispatches by family"


def test_tiny_models_come_from_the_families_own_modules() -> None:
    from audiogate.testing import tiny_models

    for family in FAMILIES:
        if (family.root / family.package / "tiny_model.py").is_file():
            module = tiny_models._family_module(family.name)
            assert module is not None, family.name
            assert callable(module.build), family.name
    with pytest.raises(ValueError, match="no tiny model for 'nosuchfamily'"):
        tiny_models.build_tiny_model("nosuchfamily")
