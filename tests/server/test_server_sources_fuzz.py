"""``/v1/audio/sources`` under generated input: JSON bodies, raw bytes with any declared
type, query strings and path segments are answered with a 2xx, 3xx or a typed 4xx, never
a 500."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from serverkit import serving

from audiogate.store import SourceStore
from audiogate.testing.audio import encoded_clip

pytest.importorskip("transformers")

SOURCES = "/v1/audio/sources"
ALICE = {"Authorization": "Bearer tok-alice"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
WAV = encoded_clip(seconds=0.5, seed=2).data
WAV_B64 = base64.b64encode(WAV).decode()
audio_fields = st.fixed_dictionaries(
    {},
    optional={
        "data": st.sampled_from(["", "AAAA", "not base64!", "UklGRg==", WAV_B64, WAV_B64[:-8]])
        | json_values,
        "format": st.sampled_from(["wav", "pcm16", "f32", "mp3", "x"]) | json_values,
        "sample_rate": st.sampled_from([16_000, 0, -1, 10**12]) | json_values,
        "channels": st.sampled_from([1, 2, 0, 999]) | json_values,
        "url": st.sampled_from(["file://x.wav", "http://127.0.0.1/x", "data:audio/wav;base64,"])
        | json_values,
    },
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "input_audio": audio_fields | json_values,
        "audio_url": audio_fields | json_values,
        "scope": st.sampled_from(["shared", "private", "x"]) | json_values,
    },
)
content_types = st.sampled_from(
    [
        "application/json",
        "audio/wav",
        "audio/mpeg",
        "audio/ogg",
        "application/octet-stream",
        "text/plain",
        "audio/wav; charset=x",
        "",
    ]
)
segments = st.text(
    alphabet=st.characters(
        min_codepoint=33,
        max_codepoint=0x2FF,
        exclude_categories=("Cc", "Cs"),
        exclude_characters="/?#%",
    ),
    min_size=1,
    max_size=70,
) | st.sampled_from(["a" * 64, "A" * 64, "0" * 63, "g" * 64])


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    store = SourceStore.open(Path(tmp_path_factory.mktemp("fuzz")) / "store")
    with serving("qwen2-audio-7b-instruct", store=store, owners={"tok-alice": "alice"}) as running:
        yield running


FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(body=bodies | json_values, scope=st.none() | st.sampled_from(["shared", "x", ""]))
@example(body={"input_audio": {"data": [], "format": "wav"}}, scope=None)
@example(body={"input_audio": {"data": WAV_B64, "format": "wav"}}, scope="shared")
def test_generated_json_uploads_are_never_a_500(running, body, scope) -> None:
    query = "" if scope is None else f"?scope={scope}"
    reply = running.client.post(
        SOURCES + query,
        content=json.dumps(body).encode(),
        headers={**ALICE, "Content-Type": "application/json"},
    )
    assert reply.status_code < 500, (body, reply.text)


@FUZZ
@given(
    data=st.binary(max_size=200) | st.sampled_from([WAV, WAV[:44], WAV[:-1], WAV + b"x"]),
    content_type=content_types,
)
def test_generated_byte_uploads_are_never_a_500(running, data, content_type) -> None:
    headers = {**ALICE, "Content-Type": content_type} if content_type else dict(ALICE)
    reply = running.client.post(SOURCES, content=data, headers=headers)
    assert reply.status_code < 500, (data[:64], content_type, reply.text)


@FUZZ
@given(segment=segments, method=st.sampled_from(["GET", "DELETE"]))
def test_generated_source_paths_are_never_a_500(running, segment, method) -> None:
    reply = running.client.request(method, f"{SOURCES}/{segment}", headers=ALICE)
    assert reply.status_code < 500, (segment, method, reply.text)
    listing = running.client.get(SOURCES + "?include_retired=" + segment[:8], headers=ALICE)
    assert listing.status_code < 500, (segment, listing.text)
