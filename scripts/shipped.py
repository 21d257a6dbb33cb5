"""The shipped families of ``families.toml``: the one list everything that enumerates
them reads (the Makefile through this script's command line, pytest's collection, the
scripts, the meta-tests).

Usage: ``python scripts/shipped.py [--list FILE] names|dirs|packages|pip-args|install-inputs``
prints one space-separated line (what the Makefile reads); nothing else is imported, so
any Python 3.11 runs it before the virtual environment exists. A listed folder without a
``pyproject.toml`` is left out of ``pip-args`` and ``install-inputs`` (with a warning), so
it cannot break an install; ``tests/meta/test_shipped.py`` fails on it.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["LIST", "ROOT", "ShippedFamily", "shipped_families"]

ROOT: Final = Path(__file__).resolve().parent.parent
LIST: Final = ROOT / "families.toml"
_FIELDS: Final = {"name", "dir", "examples"}


@dataclass(frozen=True)
class ShippedFamily:
    """One line of ``families.toml``.

    :param name: the family (its ``audiogate.families`` entry point).
    :param dir: its folder under ``plugins/``.
    :param examples: its bundled model directories under ``examples/models/``.
    """

    name: str
    dir: str
    examples: tuple[str, ...]

    @property
    def root(self) -> Path:
        """The distribution's folder, ``plugins/<dir>``."""
        return ROOT / "plugins" / self.dir

    @property
    def distribution(self) -> str:
        return f"audiogate-{self.dir}"

    @property
    def package(self) -> str:
        return f"audiogate_{self.dir}"

    @property
    def tests(self) -> Path:
        return self.root / "tests"


def shipped_families(path: Path = LIST) -> tuple[ShippedFamily, ...]:
    """The families listed in ``path``, in order.

    :raises ValueError: a line with a missing or unknown field, or a name or dir twice.
    """
    with path.open("rb") as handle:
        document = tomllib.load(handle)
    families = []
    for index, entry in enumerate(document.get("families", ())):
        if not isinstance(entry, dict) or set(entry) - _FIELDS or not {"name", "dir"} <= set(entry):
            raise ValueError(f"{path.name} entry {index + 1}: fields are {sorted(_FIELDS)}")
        examples = entry.get("examples", [])
        if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
            raise ValueError(f"{path.name} entry {index + 1}: examples is a list of names")
        families.append(ShippedFamily(str(entry["name"]), str(entry["dir"]), tuple(examples)))
    for field in ("name",):
        values = [getattr(family, field) for family in families]
        if len(set(values)) != len(values):
            raise ValueError(f"{path.name}: a family {field} is listed twice")
    return tuple(families)


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def main(argv: list[str]) -> int:
    path = LIST
    if argv[:1] == ["--list"] and len(argv) >= 2:
        path, argv = Path(argv[1]), argv[2:]
    families = shipped_families(path)
    dirs = _unique([family.dir for family in families])
    missing = [name for name in dirs if not (ROOT / "plugins" / name / "pyproject.toml").is_file()]
    if missing:
        print(
            f"shipped.py: skipping plugins/{{{','.join(missing)}}} (no pyproject.toml)",
            file=sys.stderr,
        )
        dirs = [name for name in dirs if name not in missing]
    outputs = {
        "names": [family.name for family in families],
        "dirs": dirs,
        "packages": _unique([family.package for family in families]),
        "pip-args": [f"-e plugins/{name}" for name in dirs],
        "install-inputs": [f"plugins/{name}/pyproject.toml" for name in dirs],
    }
    if len(argv) != 1 or argv[0] not in outputs:
        print(f"usage: shipped.py {'|'.join(outputs)}", file=sys.stderr)
        return 2
    print(" ".join(outputs[argv[0]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
