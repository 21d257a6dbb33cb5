"""``audiogate serve --engine ray``'s command line, without starting Ray."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from audiogate.cli import main
from audiogate.server import ServeOptions

GEMMA = Path(__file__).parents[2] / "examples" / "models" / "gemma-3n-e4b-it"


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        (["--num-replicas", "2"], "--num-replicas goes with --engine ray"),
        (["--ray-address", "auto"], "--ray-address goes with --engine ray"),
        (
            ["--engine", "ray", "--num-replicas", "2", "--max-replicas", "4"],
            "give --num-replicas or --min/--max-replicas, not both",
        ),
    ],
)
def test_usage_errors(capsys, extra, want):
    assert main(["serve", "--model", str(GEMMA), *extra]) == 2
    assert want in capsys.readouterr().err


def test_without_ray_the_error_names_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["serve", "--model", str(GEMMA), "--engine", "ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip install 'audiogate[ray]'" in err


def test_replicas_or_autoscaling_not_both():
    pytest.importorskip("ray.serve")
    from audiogate.integrations.ray_serve import build_application

    with pytest.raises(ValueError, match="not both"):
        build_application(
            ServeOptions(model_dir=GEMMA), num_replicas=2, autoscaling_config={"max_replicas": 3}
        )
