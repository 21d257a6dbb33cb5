"""The small pieces of :mod:`audiogate.dsp`: per-thread scratch, the identity resample and
the MLX module loader."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import audiogate.dsp
from audiogate.dsp import load_mlx_module, plan_identity, resample_identity, thread_scratch
from audiogate.errors import MissingExtraError, PluginError
from audiogate.records import readonly


def test_scratch_is_built_once_per_thread_and_key() -> None:
    built: list[str] = []

    def build() -> list[str]:
        built.append(threading.current_thread().name)
        return []

    mine = thread_scratch(("test_dsp", 1), build)
    assert thread_scratch(("test_dsp", 1), build) is mine
    assert thread_scratch(("test_dsp", 2), build) is not mine
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(thread_scratch(("test_dsp", 1), build)))
    thread.start()
    thread.join()
    assert other[0] is not mine
    assert len(built) == 3


def test_identity_plan_keeps_the_length_and_may_relabel() -> None:
    plan = plan_identity(source_rate_hz=16_000, source_samples=5)
    assert (plan.output_rate_hz, plan.output_samples, plan.algorithm) == (16_000, 5, "identity")
    assert plan.working_bytes == 0
    relabelled = plan_identity(
        source_rate_hz=22_050, source_samples=5, output_rate_hz=16_000, detail={"down": 1}
    )
    assert relabelled.output_rate_hz == 16_000
    assert dict(relabelled.detail) == {"down": 1}


@pytest.mark.parametrize("samples", [0, 1, 2, 1000])
def test_identity_resample_passes_read_only_float32_through(samples: int) -> None:
    frozen = readonly(np.arange(samples, dtype=np.float32))
    assert resample_identity(frozen) is frozen
    writable = np.arange(samples, dtype=np.float32)
    copied = resample_identity(writable)
    assert copied is not writable
    assert not copied.flags.writeable
    assert np.array_equal(copied, writable)
    widened = resample_identity(np.arange(samples, dtype=np.float64))  # type: ignore[arg-type]
    assert widened.dtype == np.float32


def test_mlx_loader_names_family_clip_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as hidden:
        hidden.setitem(sys.modules, "mlx", None)
        hidden.setitem(sys.modules, "mlx.core", None)
        with pytest.raises(MissingExtraError, match=r"pip install 'audiogate\[mlx\]'") as caught:
            load_mlx_module("audiogate.dsp.scratch", family="toy", clip_index=3)
    assert caught.value.extra == "mlx"
    assert "family 'toy'" in str(caught.value)
    assert "(clip 4)" in str(caught.value)  # clips are numbered from 1 in messages
    assert "feature_backend='numpy'" in str(caught.value)


def test_mlx_loader_blames_a_kernel_that_does_not_import_not_mlx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("mlx.core", reason="the kernel is imported after MLX")
    monkeypatch.setitem(sys.modules, "audiogate_test_broken_kernel", None)
    with pytest.raises(PluginError, match="'audiogate_test_broken_kernel' does not import"):
        load_mlx_module("audiogate_test_broken_kernel", family="toy", clip_index=3)
    assert (
        load_mlx_module("audiogate.dsp.scratch", family="toy")
        is sys.modules["audiogate.dsp.scratch"]
    )


def test_importing_the_toolkit_imports_neither_mlx_nor_scipy() -> None:
    import subprocess

    code = (
        "import sys, audiogate.dsp; "
        "print(any(m == 'mlx' or m.startswith(('mlx.', 'scipy')) for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert set(audiogate.dsp.__all__) >= {"run_blocks", "thread_scratch", "triangular_filters"}
