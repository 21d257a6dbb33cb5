"""A gate computes only the feature backends its family declares: ``"mlx"`` for a family
without MLX kernels is refused at construction and per call, never answered with NumPy."""

from __future__ import annotations

import pytest
from shipped import shipped_families

from audiogate.api import AudioGate
from audiogate.errors import PolicyError
from audiogate.testing.audio import encoded_clip

#: The families that ship MLX kernels (docs/mlx.md).
WITH_MLX = {"phi4mm", "gemma3n", "qwen2audio"}


FAMILIES = {family.name for family in shipped_families()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_declares_the_backends_it_computes(host, family: str) -> None:
    backends = host.family(family).spec.feature_backends
    assert "numpy" in backends
    assert ("mlx" in backends) == (family in WITH_MLX)


@pytest.mark.parametrize("family", sorted(FAMILIES - WITH_MLX))
def test_mlx_for_a_family_without_mlx_kernels_is_refused(host, family: str) -> None:
    with pytest.raises(PolicyError, match=f"'mlx' is not available for the {family} family"):
        AudioGate.from_family(family, host=host, feature_backend="mlx")
    gate = AudioGate.from_family(family, host=host)
    clip = encoded_clip(seconds=1.0, seed=1)
    with pytest.raises(PolicyError, match=r"docs/mlx\.md"):
        gate.prepare(clips=[clip], feature_backend="mlx")
    assert gate.prepare(clips=[clip]).batch is not None  # numpy still answers
