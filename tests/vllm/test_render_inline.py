"""The render route's work on the event loop (issue #31): a body of few JSON values is
parsed there, and an answer whose items are all cached is written there, without the
two thread hops each of these costs on the helper thread; anything else still goes to
that thread."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from vllmkit import RenderApp

from audiogate.server.vllm_render import _parses_fast
from audiogate.vllm.fixtures import RENDER_REQUESTS, request_body

CASES = {case.name: case for case in RENDER_REQUESTS}


def test_a_render_body_around_base64_clips_parses_on_the_loop() -> None:
    body = json.dumps(request_body(CASES["stereo48k_5s"], "m")).encode()
    assert len(body) > 1_000_000
    assert _parses_fast(body)
    assert _parses_fast(b'{"a": [' + b"1," * 100_000 + b"1]}")  # small (200 kB)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": [' + b"1," * 600_000 + b"1]}",  # many small values
        b'{"' + b'a":{"' * 300_000 + b'"}',
        b'{"a": "' + b"\\n" * 600_000 + b'"}',  # a long string of escapes
        b'{"a": "' + base64.b64encode(b"\0" * 3_500_000) + b'"}',  # over 4 MiB
    ],
    ids=["commas", "colons", "escapes", "large"],
)
def test_other_bodies_parse_on_the_helper_thread(body: bytes) -> None:
    assert not _parses_fast(body)


def test_an_answer_of_cached_items_is_written_on_the_loop() -> None:
    app = RenderApp("qwen2audio")
    server = app.client.app.state.audiogate  # type: ignore[attr-defined]
    hops: list[str] = []
    off_loop = server.off_loop

    async def counted(function: Any, *args: Any) -> Any:
        hops.append(getattr(function, "__name__", repr(function)))
        return await off_loop(function, *args)

    server.off_loop = counted
    body = request_body(CASES["stereo48k_5s"], app.served) | {"request_id": "same"}
    with app.client:
        first = app.render(body)
        after_first = list(hops)
        second = app.render(body)
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert after_first == ["_encode"]  # the item encoded on the helper thread, once
    assert hops == after_first  # the second answer: no hop (parse nor encode)
