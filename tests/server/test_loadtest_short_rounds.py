"""The overload sweep's short rounds (benchmarks/loadtest_server.py, issue #33): each
round runs c = 1, 8, 32, 64 alternately up and down on one server, and each ratio is
read within its round (goodput at c over the highest at a lower c of the same round)."""

from __future__ import annotations

from typing import Any

import pytest


def test_short_rounds_alternate_and_read_each_ratio_within_its_round(loadtest, monkeypatch) -> None:
    # Round 0 runs at full speed, round 1 at half speed (a drift between rounds): the
    # ratios within each round are unmoved by it.
    goodput = {1: 300.0, 8: 500.0, 32: 450.0, 64: 520.0}
    order: list[int] = []

    def point(server: Any, bodies: Any, c: int, **kw: Any) -> dict[str, float]:
        order.append(c)
        speed = 1.0 if len(order) <= 4 else 0.5
        return {"goodput": goodput[c] * speed}

    monkeypatch.setattr(loadtest, "sweep_point", point)
    ratios = loadtest.short_ratios(None, [], rounds=2, duration_s=1.0, warmup_s=0.0, processes=1)
    assert order == [1, 8, 32, 64, 64, 32, 8, 1]
    assert ratios[32] == pytest.approx([0.9, 0.9])
    assert ratios[64] == pytest.approx([1.04, 1.04])  # over c = 8, the highest below it
