"""Running audiogate on other frameworks' infrastructure (each module needs its extra):
:mod:`audiogate.integrations.ray_serve` deploys the reference server on Ray Serve."""

from __future__ import annotations

__all__: list[str] = []
