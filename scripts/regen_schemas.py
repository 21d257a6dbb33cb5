"""Regenerate each shipped family's ``schema.json`` from its key table.

Run after changing a family's recognized keys; the freshness tests fail until you do.
Usage: ``python scripts/regen_schemas.py [--check]``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from shipped import ShippedFamily, shipped_families

from audiogate.policy import build_schema, dump_schema

ROOT = Path(__file__).resolve().parent.parent
#: The shipped families (families.toml), each with its package's schema.json.
FAMILIES: tuple[ShippedFamily, ...] = shipped_families()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a schema is stale")
    args = parser.parse_args()
    stale = []
    for family in FAMILIES:
        module = importlib.import_module(f"{family.package}.policy")
        text = dump_schema(build_schema(family.name, module.POLICY_KEYS))
        path = family.root / family.package / "schema.json"
        if not path.exists() or path.read_text("utf-8") != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(text, "utf-8")
    if stale:
        print(("stale: " if args.check else "wrote: ") + ", ".join(stale))
    return 1 if (stale and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
