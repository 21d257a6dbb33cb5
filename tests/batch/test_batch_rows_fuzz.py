"""Generated manifest rows: :func:`~audiogate.batch.prepare_row` answers every one with a
row, ``ok`` or a typed error, never ``internal`` (an exception audiogate did not raise on
purpose) and never an exception."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from batchkit import GEMMA
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from audiogate.batch import GateSpec, policy_fingerprint, prepare_row
from audiogate.testing.audio import encoded_clip

WAV = encoded_clip(seconds=0.4, seed=5).data
WAV_B64 = base64.b64encode(WAV).decode()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20) | json_values}),
    st.fixed_dictionaries(
        {
            "type": st.just("input_audio"),
            "input_audio": st.fixed_dictionaries(
                {},
                optional={
                    "data": st.sampled_from([WAV_B64, "AAAA", ""]) | json_values,
                    "format": st.sampled_from(["wav", "mp3", "pcm16"]) | json_values,
                },
            )
            | json_values,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["audio_url", "audio_ref", "image_url", "x"]),
            "audio_url": st.fixed_dictionaries(
                {"url": st.sampled_from(["c.wav", "../c.wav", "file://c.wav", "http://x/y"])}
            )
            | json_values,
        }
    ),
    json_values,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system"]) | json_values},
        optional={"content": st.text(max_size=20) | st.lists(parts, max_size=3) | json_values},
    )
    | json_values,
    max_size=3,
)
ids = st.text(min_size=1, max_size=5) | st.integers(min_value=0)
audio_rows = st.fixed_dictionaries(
    {
        "id": ids,
        "audio": st.sampled_from(["c.wav", "missing.wav", "../c.wav", "", "file://c.wav"])
        | json_values,
    },
    optional={"prompt": st.text(max_size=20) | json_values},
)
chat_rows = st.fixed_dictionaries({"id": ids, "messages": messages | json_values})
rows = (
    audio_rows
    | chat_rows
    | st.fixed_dictionaries(
        {},
        optional={
            "id": ids | json_values,
            "messages": messages,
            "audio": st.just("c.wav"),
            "prompt": json_values,
        },
    )
)


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    media = Path(tmp_path_factory.mktemp("media"))
    (media / "c.wav").write_bytes(WAV)
    built = GateSpec(model_dir=str(GEMMA), media_root=str(media)).build()
    return built, policy_fingerprint(built.policy)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(row=rows | json_values | st.text(max_size=30))
@example(row={"id": "a", "audio": "c.wav", "prompt": "Hi"})
def test_generated_rows_are_answered_never_internal(gate, row) -> None:
    built, fingerprint = gate
    raw = row if isinstance(row, str) else json.dumps(row)
    out = prepare_row(built, raw, fingerprint=fingerprint)
    assert out["status"] in {"ok", "error"}
    assert out["error_code"] != "internal", (row, out["error"])
    event(out["status"] if out["status"] == "ok" else str(out["error_code"]))
    if out["status"] == "ok":
        assert out["error_code"] is None
        assert len(out["features"]) == len(out["tokens"]) == len(out["frames"])
