"""The wheels and the core sdist carry what an install from an index needs.

CI and the tutorial use editable installs, which read the source tree; a wheel only has
what hatchling packs. So each distribution is built here (in process, offline, with the
hatchling of the test requirements) and its contents are checked against the tree: every
module and data file (``schema.json``, ``py.typed``), the entry points that make a family
a plugin, the version and the core pin.
"""

from __future__ import annotations

import configparser
import email
import importlib.util
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("hatchling", reason="hatchling (requirements/test.txt) builds the wheels")

from hatchling.builders.sdist import SdistBuilder
from hatchling.builders.wheel import WheelBuilder
from shipped import shipped_families

ROOT = Path(__file__).resolve().parents[2]

#: distribution root, import package directory (relative), entry-point group → names.
DISTRIBUTIONS: dict[str, tuple[Path, str, dict[str, dict[str, str]]]] = {
    "audiogate": (ROOT, "core/audiogate", {"console_scripts": {"audiogate": "audiogate.cli:main"}}),
}
# The shipped families (families.toml): plugins/<dir>, one entry point per family listed.
for _family in shipped_families():
    _, _, _groups = DISTRIBUTIONS.setdefault(
        _family.distribution, (_family.root, _family.package, {"audiogate.families": {}})
    )
    _groups["audiogate.families"][_family.name] = f"{_family.package}.plugin"
DISTRIBUTIONS |= {
    "audiogate-toyvoice": (
        ROOT / "examples" / "plugins" / "audiogate-toyvoice",
        "audiogate_toyvoice",
        {"audiogate.families": {"toyvoice": "audiogate_toyvoice.plugin"}},
    ),
}


def _source_files(package_dir: Path) -> set[str]:
    """Files of an import package as wheel paths (``audiogate/cli.py``), no caches."""
    return {
        f"{package_dir.name}/{path.relative_to(package_dir).as_posix()}"
        for path in package_dir.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def _version(package_dir: Path, root: Path) -> str:
    with (root / "pyproject.toml").open("rb") as handle:
        version_path = tomllib.load(handle)["tool"]["hatch"]["version"]["path"]
    spec = importlib.util.spec_from_file_location("_version_probe", root / version_path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.__version__)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    built = {}
    for name, (root, _, _) in DISTRIBUTIONS.items():
        (path,) = WheelBuilder(str(root)).build(directory=str(out), versions=["standard"])
        built[name] = Path(path)
    return built


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_the_wheel_holds_exactly_the_package(wheels, name) -> None:
    root, package, _ = DISTRIBUTIONS[name]
    package_dir = root / package
    with zipfile.ZipFile(wheels[name]) as wheel:
        names = set(wheel.namelist())
        packed = {n for n in names if ".dist-info/" not in n}
        assert packed == _source_files(package_dir)
        for data in (p for p in packed if not p.endswith(".py")):
            # schema.json and py.typed byte for byte.
            source = package_dir.parent / data
            assert wheel.read(data) == source.read_bytes(), data


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_metadata_and_entry_points(wheels, name) -> None:
    root, package, groups = DISTRIBUTIONS[name]
    version = _version(root / package, root)
    assert wheels[name].name.startswith(f"{name.replace('-', '_')}-{version}-")
    with zipfile.ZipFile(wheels[name]) as wheel:
        info = f"{name.replace('-', '_')}-{version}.dist-info"
        metadata = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
        entry_points = configparser.ConfigParser(delimiters=("=",))
        entry_points.optionxform = str  # type: ignore[assignment,method-assign]
        entry_points.read_string(wheel.read(f"{info}/entry_points.txt").decode())
    assert metadata["Name"] == name
    assert metadata["Version"] == version
    assert metadata["Requires-Python"] == ">=3.11"
    for group, expected in groups.items():
        assert {k: v.strip() for k, v in entry_points[group].items()} == expected
    requires = metadata.get_all("Requires-Dist") or []
    if name == "audiogate":
        # The pytest plugin that gives family authors the contract fixtures.
        assert entry_points["pytest11"]["audiogate"].strip() == "audiogate.testing.plugin"
        assert any(r.startswith("mlx") and "extra == 'mlx'" in r for r in requires)
    else:
        # Every family pins the core's minor version.
        assert any(r.replace(" ", "") in ("audiogate<0.2,>=0.1",) for r in requires), requires


def test_the_core_sdist_builds_and_holds_the_package(tmp_path: Path) -> None:
    (path,) = SdistBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    with tarfile.open(path) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names
    assert {f"core/{f}" for f in _source_files(ROOT / "core" / "audiogate")} <= names
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)
