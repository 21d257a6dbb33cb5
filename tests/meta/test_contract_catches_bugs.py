"""The family contract suite fails on the bugs ``docs/plugins/testing.md`` says it catches.

Each test plants one bug in the tutorial's toy family (``examples/plugins/
audiogate-toyvoice``, registered directly) and runs the contract check that should see
it: the check must fail, whatever the warning filters, and pass on the family as shipped.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from audiogate.host import FamilyHost, create_host
from audiogate.policy import AudioPolicy
from audiogate.testing.contract import FamilyContract

TOYVOICE = Path(__file__).resolve().parents[2] / "examples" / "plugins" / "audiogate-toyvoice"


@pytest.fixture
def toyvoice(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The toy family's package, importable from the example folder for this test."""
    monkeypatch.syspath_prepend(str(TOYVOICE))
    import audiogate_toyvoice.plugin

    yield audiogate_toyvoice
    for name in [m for m in sys.modules if m.startswith("audiogate_toyvoice")]:
        monkeypatch.delitem(sys.modules, name)


class _Suite(FamilyContract):
    family = "toyvoice"
    __test__ = False  # run by hand below, not collected


def _run(toyvoice: Any, check: Callable[[FamilyContract, FamilyHost, AudioPolicy], None]) -> None:
    suite = _Suite()
    suite.plugins = (toyvoice.plugin,)
    host = create_host(plugins=[toyvoice.plugin], load_entry_points=False)
    check(suite, host, suite.make_policy(host))


def _extreme(suite: FamilyContract, host: FamilyHost, policy: AudioPolicy) -> None:
    suite.test_extreme_signals_give_finite_features(host, policy)


def _awkward(suite: FamilyContract, host: FamilyHost, policy: AudioPolicy) -> None:
    suite.test_an_awkward_source_rate_is_refused_or_planned_small(host, policy)


@pytest.mark.parametrize("check", [_extreme, _awkward])
def test_the_shipped_toy_family_passes(toyvoice: Any, check: Callable[..., None]) -> None:
    _run(toyvoice, check)


@pytest.mark.parametrize("filters", ["error", "default", "ignore"])
def test_a_log_mel_without_a_floor_fails_whatever_the_warning_filters(
    toyvoice: Any, monkeypatch: pytest.MonkeyPatch, filters: str
) -> None:
    # log(max(x, 0)) is log(0) = -inf for silence: under "error" numpy's divide warning
    # reached the host as a PluginError, which the check used to take for a refusal.
    monkeypatch.setattr(toyvoice.logmel, "LOG_FLOOR", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter(filters)
        with pytest.raises(AssertionError, match="silence"):
            _run(toyvoice, _extreme)


@pytest.mark.parametrize("rate_hz", [16_001, 47_999])
def test_a_resample_planner_that_crashes_at_an_awkward_rate_fails(
    toyvoice: Any, monkeypatch: pytest.MonkeyPatch, rate_hz: int
) -> None:
    # A bare ValueError is a PluginError through the host, and a 500 for a real request.
    planner = toyvoice.resample.plan_resample

    def crashing(policy: AudioPolicy, *, source_rate_hz: int, **kwargs: Any) -> Any:
        if source_rate_hz == rate_hz:
            raise ValueError(f"no ratio for {source_rate_hz}")
        return planner(policy, source_rate_hz=source_rate_hz, **kwargs)

    monkeypatch.setattr(toyvoice.resample, "plan_resample", crashing)
    with pytest.raises(AssertionError, match=f"planning {rate_hz} Hz crashed"):
        _run(toyvoice, _awkward)
