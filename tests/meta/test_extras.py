"""A missing optional extra is one error type, raised through one helper.

``audiogate.extras.EXTRAS`` is ``pyproject.toml``'s extras by module; every import of an
optional module in the shipped code goes through :func:`audiogate.extras.require_module`
(read from the source with ``ast``), except the few places listed here with the reason.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from audiogate.errors import (
    AudioGateError,
    CodecsUnavailableError,
    DecodeError,
    MissingExtraError,
)
from audiogate.extras import EXTRAS, extra_of, installed, require_module

ROOT = Path(__file__).resolve().parents[2]

#: Optional top-level modules: every extra's, and those no extra installs (torch for
#: ``return_tensors="pt"``, safetensors for the server's ``feature_format``).
OPTIONAL = {module for modules in EXTRAS.values() for module in modules} | {
    "torch",
    "safetensors",
}

#: Source files that may import an optional module directly, and why.
ALLOWED = {
    "core/audiogate/extras.py": "the helper itself",
    "core/audiogate/decode/child.py": "the decoder process, started only after "
    "decode.isolation.missing_codecs found the codec's module",
    "core/audiogate/dsp/mlx_fft.py": "an MLX kernel, imported only through load_mlx_module",
    "core/audiogate/dsp/mlx_constants.py": "called only from the MLX kernels",
    "plugins/gemma3n/audiogate_gemma3n/mlx_logmel.py": "an MLX kernel (load_mlx_module)",
    "plugins/phi4mm/audiogate_phi4mm/mlx_logmel.py": "an MLX kernel (load_mlx_module)",
    "plugins/qwen2audio/audiogate_qwen2audio/mlx_logmel.py": "an MLX kernel (load_mlx_module)",
    "core/audiogate/api.py": "transformers' chat template compiler, after require_module "
    "found transformers (its private path moves between versions: an ImportError is "
    "handled there)",
}


def _shipped_sources() -> list[Path]:
    roots = [ROOT / "core" / "audiogate", *(ROOT / "plugins").glob("*/audiogate_*")]
    return sorted(
        path
        for root in roots
        for path in root.rglob("*.py")
        # The test toolkit builds tiny models with transformers and torch for tests.
        if "testing" not in path.relative_to(ROOT).parts
    )


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _optional_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text("utf-8"))
    hidden = _type_checking_lines(tree)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            if name.partition(".")[0] in OPTIONAL and node.lineno not in hidden:
                found.append((node.lineno, name))
    return found


def _test_only(path: Path) -> bool:
    # A family's tiny random model (read by audiogate.testing.tiny_models): built only by
    # tests, where torch and transformers are installed.
    return path.name == "tiny_model.py" and path.relative_to(ROOT).parts[0] == "plugins"


def test_every_optional_import_goes_through_the_helper() -> None:
    stray = {
        f"{path.relative_to(ROOT)}:{line}": name
        for path in _shipped_sources()
        if str(path.relative_to(ROOT)) not in ALLOWED and not _test_only(path)
        for line, name in _optional_imports(path)
    }
    assert stray == {}, "import these with audiogate.extras.require_module"


def test_the_allowed_list_is_not_stale() -> None:
    for relative in ALLOWED:
        assert (ROOT / relative).is_file(), relative
        if relative != "core/audiogate/extras.py":
            assert _optional_imports(ROOT / relative), f"{relative} imports no optional module"


def test_the_extras_are_the_projects() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        declared = tomllib.load(handle)["project"]["optional-dependencies"]
    assert set(EXTRAS) == set(declared)


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("soundfile", "codecs"),
        ("av", "codecs-ffmpeg"),
        ("pyarrow.parquet", "batch"),
        ("ray.data", "ray"),
        ("mlx.core", "mlx"),
        ("transformers", "chat"),
        ("torch", None),
        ("safetensors.numpy", None),
    ],
)
def test_a_missing_module_is_one_error_type_naming_its_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, extra: str | None
) -> None:
    assert extra_of(module) == (extra if module != "pyarrow.parquet" else "batch")
    monkeypatch.setitem(sys.modules, module.partition(".")[0], None)
    monkeypatch.setitem(sys.modules, module, None)
    assert not installed(module)
    with pytest.raises(MissingExtraError) as info:
        require_module(module, purpose="this test", hint="or skip it")
    error = info.value
    assert isinstance(error, AudioGateError)
    assert (error.module, error.extra, error.code) == (module, extra, "missing_extra")
    install = (
        f"pip install 'audiogate[{extra}]'" if extra else f"pip install {module.partition('.')[0]}"
    )
    assert str(error) == f"this test needs {module}, which is not installed: {install}; or skip it"


def test_a_present_module_is_returned() -> None:
    assert installed("json")
    assert require_module("json", purpose="this test") is sys.modules["json"]


def test_missing_codecs_are_a_decode_error_of_the_clip_and_a_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from audiogate.decode.isolation import missing_codecs

    monkeypatch.setitem(sys.modules, "soundfile", None)
    error = missing_codecs("flac", clip_index=2)
    assert isinstance(error, CodecsUnavailableError)
    assert isinstance(error, DecodeError)
    assert isinstance(error, MissingExtraError)
    assert (error.code, error.extra, error.clip_index, error.reason) == (
        "codecs_unavailable",
        "codecs",
        2,
        "waveform",
    )
    assert str(error) == (
        "audio clip 3 cannot be decoded here: decoding flac needs soundfile, which is not "
        "installed: pip install 'audiogate[codecs]'"
    )
