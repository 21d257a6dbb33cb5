"""audiogate's render answers against vLLM's own, recorded by
``scripts/vllm/record_fixtures.py`` (vLLM 0.32.0, the CPU package) on the bundled
checkpoints: ids, placeholders, masks, sampling parameters, item layout and features.

At 16 kHz both renderers compute the same features (they differ by bf16 rounding of
float32 noise: one unit in the last place). At 48 kHz they resample differently
(audiogate's soxr HQ for Qwen2-Audio and the Gemma 3n seed's linear interpolation, vLLM's
torchaudio sinc), so only the layout is exact and the values are bounded loosely there.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audiogate.vllm import TESTED_VLLM, decode_tensor
from audiogate.vllm.fixtures import CLIPS, RENDER_REQUESTS, request_body
from audiogate.vllm.msgpack import unpackb
from conftest import RenderApp

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"
#: Largest |difference| of a feature value where the clip is resampled (48 kHz), by family;
#: measured: 0.56 (Qwen2-Audio's normalized log-mel), 4.2 (Gemma 3n's log-mel; the
#: resampling_algorithm policy of issue #31 narrows it).
RESAMPLED_MAX_DIFF = {"qwen2audio": 1.0, "gemma3n": 6.0}


def _recorded(family: str) -> dict[str, Any]:
    recorded = json.loads((DATA / f"{family}.json").read_text())
    assert recorded["vllm_version"] == TESTED_VLLM
    return recorded


def _vllm_items(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        unpackb(zlib.decompress(base64.b64decode(item["zlib_base64"])))
        for item in answer["features"]["kwargs_data"]["audio"]
    ]


def _resampled(case_parts: tuple[str, ...]) -> list[bool]:
    return [CLIPS[p[6:]].rate_hz != 16_000 for p in case_parts if p.startswith("audio:")]


@pytest.mark.parametrize("case", RENDER_REQUESTS, ids=lambda case: case.name)
def test_render_matches_vllm(app: RenderApp, case: Any) -> None:
    recorded = _recorded(app.family)["requests"][case.name]
    response = app.render(request_body(case, app.served))
    assert response.status_code == recorded["status"], response.text
    if recorded["status"] != 200:
        return  # both refuse (adjacent Gemma 3n clips: overlapping placeholder ranges)
    ours, theirs = response.json(), recorded["answer"]
    assert set(ours) == set(theirs)
    assert ours["token_ids"] == theirs["token_ids"]
    assert ours["sampling_params"] == theirs["sampling_params"]
    for field in ("model", "stream", "stream_options", "cache_salt", "priority", "output_mode"):
        assert ours[field] == theirs[field], field
    assert ours["request_id"].split("-")[0] == theirs["request_id"].split("-")[0]
    if theirs["features"] is None:
        assert ours["features"] is None
        return
    ours_f, theirs_f = ours["features"], theirs["features"]
    assert ours_f["mm_placeholders"] == theirs_f["mm_placeholders"]
    assert ours_f["mm_metadata"] == theirs_f["mm_metadata"] is None
    # Hashes differ by design (audiogate's cover the policy and the dtype too).
    assert len(ours_f["mm_hashes"]["audio"]) == len(theirs_f["mm_hashes"]["audio"])
    mine = [unpackb(base64.b64decode(item)) for item in ours_f["kwargs_data"]["audio"]]
    sizes = [item["base64_chars"] for item in theirs_f["kwargs_data"]["audio"]]
    assert [len(item) for item in ours_f["kwargs_data"]["audio"]] == sizes
    for ours_item, theirs_item, resampled in zip(
        mine, _vllm_items(theirs), _resampled(case.parts), strict=True
    ):
        assert list(ours_item) == list(theirs_item)
        for key, elem in theirs_item.items():
            assert ours_item[key]["field"] == elem["field"]
            dtype, shape, _ = elem["data"]
            assert ours_item[key]["data"][:2] == [dtype, shape], key
            got = decode_tensor(ours_item[key]["data"]).astype(np.float64)
            want = decode_tensor(elem["data"]).astype(np.float64)
            if dtype in ("bool", "int32"):
                assert np.array_equal(got, want), key  # the masks
            elif resampled:
                assert np.max(np.abs(got - want)) < RESAMPLED_MAX_DIFF[app.family], key
            else:
                # One bf16 unit in the last place (8 significant bits) at most.
                np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-10, err_msg=key)
