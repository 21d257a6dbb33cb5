"""audiogate's render answers against vLLM's own, recorded by
``scripts/vllm/record_fixtures.py`` (vLLM 0.32.0, the CPU package) on the bundled
checkpoints: ids, placeholders, masks, sampling parameters, item layout and features.

At 16 kHz both renderers compute the same features (they differ by bf16 rounding of
float32 noise: one unit in the last place). At 48 kHz they resample differently
(audiogate's soxr HQ for Qwen2-Audio and Gemma 3n's pinned linear interpolation, vLLM's
torchaudio sinc), so only the layout is exact and the values are bounded loosely there.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from transformers.utils import chat_template_utils
from vllmkit import RenderApp, compare_answer

from audiogate.vllm import TESTED_VLLM
from audiogate.vllm.fixtures import RENDER_REQUESTS, RenderCase

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"


def _recorded(family: str) -> dict[str, Any]:
    recorded = json.loads((DATA / f"{family}.json").read_text())
    assert recorded["vllm_version"] == TESTED_VLLM
    return recorded


def _render_on(day: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chat templates' ``strftime_now`` (transformers' clock, read when a template renders)
    answers ``day`` (ISO), so a template that names today (Granite's system prompt) renders
    as on the day the fixture was recorded."""
    recorded = datetime.date.fromisoformat(day)

    class RecordedDay(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> datetime.datetime:
            return datetime.datetime.combine(recorded, datetime.time(12), tz)

    monkeypatch.setattr(chat_template_utils, "datetime", RecordedDay)


@pytest.mark.parametrize("case", RENDER_REQUESTS, ids=lambda case: case.name)
def test_render_matches_vllm(
    app: RenderApp, case: RenderCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = _recorded(app.family)
    if "recorded_on" in recorded:
        _render_on(recorded["recorded_on"], monkeypatch)
    compare_answer(app, case, recorded["requests"][case.name])
