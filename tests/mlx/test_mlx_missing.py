"""Selecting the mlx backend where MLX is not importable fails with install instructions.

No ``importorskip`` here: MLX is hidden from the import system, so this runs everywhere.
"""

from __future__ import annotations

import importlib
import sys

import attrs
import numpy as np
import pytest
from shipped import shipped_families

from audiogate.cancel import NEVER
from audiogate.errors import MissingExtraError
from audiogate.records import ClipFeatures

#: The shipped families with an MLX kernel of their own.
PACKAGES = {
    family.name: family.package
    for family in shipped_families()
    if (family.root / family.package / "mlx_logmel.py").is_file()
}


@pytest.fixture
def without_mlx(monkeypatch) -> None:
    """Make ``import mlx.core`` fail and forget any imported MLX kernel."""
    monkeypatch.setitem(sys.modules, "mlx", None)
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    for package in PACKAGES.values():
        monkeypatch.delitem(sys.modules, f"{package}.mlx_logmel", raising=False)
        monkeypatch.delattr(importlib.import_module(package), "mlx_logmel", raising=False)


@pytest.mark.parametrize("family", list(PACKAGES))
def test_extraction_and_collation_name_the_extra(host, without_mlx, family) -> None:
    policy = attrs.evolve(host.default_policy(family), feature_backend="mlx")
    wave = np.zeros(16_000, dtype=np.float32)
    plan = host.plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=2)
    with pytest.raises(MissingExtraError, match=r"pip install 'audiogate\[mlx\]'") as caught:
        host.extract_features(policy, plan, wave, rate_hz=16_000, clip_index=2, cancel=NEVER)
    assert f"family {family!r}" in str(caught.value)
    assert "clip 3" in str(caught.value)
    numpy_policy = attrs.evolve(policy, feature_backend="numpy")
    clip = host.extract_features(
        numpy_policy, plan, wave, rate_hz=16_000, clip_index=0, cancel=NEVER
    )
    assert isinstance(clip, ClipFeatures)
    with pytest.raises(MissingExtraError, match="feature_backend='numpy'"):
        host.collate_features(policy, [clip])
