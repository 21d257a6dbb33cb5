"""Start-up stays light: importing audiogate, loading the family plugins and listing them
import none of the heavy numerics or the server's and the network's libraries.

Each check runs in a fresh interpreter (this process has imported everything already).
A family registers from its ``policy`` module alone; its stage modules, and what they
import (SciPy, soxr, MLX), load on the first hook call that needs them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from shipped import shipped_families

#: Never imported by ``import audiogate``, a host with the plugins, or ``audiogate families``.
HEAVY = ("scipy", "transformers", "torch", "mlx")
#: Imported only by the commands and paths that use them (serve, batch, URLs, metrics, checkpoint
#: config validation, soxr resampling).
ON_DEMAND = (
    "httpx",
    "prometheus_client",
    "starlette",
    "uvicorn",
    "jsonschema",
    "soxr",
    "pyarrow",
    "ray",
)

_PROBE = (
    f"SHIPPED = {[family.name for family in shipped_families()]!r}\n"
    + """
import contextlib, io, json, sys
import audiogate
from audiogate import create_host
host = create_host()
assert set(host.families) >= set(SHIPPED), list(host.families)
from audiogate.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["families"]) == 0
print(json.dumps(sorted({name.partition(".")[0] for name in sys.modules})))
"""
)


def _top_level_modules(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def loaded() -> set[str]:
    """Top-level packages imported by ``import audiogate``, a host and ``families``."""
    return _top_level_modules(_PROBE)


@pytest.mark.parametrize("package", HEAVY)
def test_the_host_and_the_families_command_import_no_numerics_library(
    loaded: set[str], package: str
) -> None:
    assert package not in loaded


@pytest.mark.parametrize("package", ON_DEMAND)
def test_the_families_command_imports_no_server_network_or_schema_library(
    loaded: set[str], package: str
) -> None:
    assert package not in loaded


def test_the_probe_sees_what_it_imports() -> None:
    # The check above would pass vacuously if the probe's module list were wrong.
    modules = _top_level_modules(_PROBE.replace("import audiogate\n", "import audiogate, soxr\n"))
    assert "soxr" in modules
    assert "audiogate_gemma3n" in modules
