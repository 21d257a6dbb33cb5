"""Request bodies (core/audiogate/server/requests.py): long plain strings (base64
uploads) are cut out before ``json`` scans the body and put back after, which must give
``json.loads``'s document, and its refusals, for any body; large bodies take a place in
the large-body lane, which bounds how many are worked on at once."""

from __future__ import annotations

import asyncio
import base64
import json
import random

import pytest

from audiogate.errors import QueueFullError
from audiogate.server.errors import BadRequestError
from audiogate.server.requests import (
    LARGE_BODY_BYTES,
    LONG_STRING_BYTES,
    LargeBodyLane,
    _cut_long_strings,
    _loads,
    parse_body,
)

LONG = LONG_STRING_BYTES


def _b64(n: int, seed: int = 0) -> str:
    return base64.b64encode(random.Random(seed).randbytes(n * 3 // 4)).decode()


def _chat(*parts: object) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": list(parts)}]}


def _audio(data: str) -> dict:
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def _refusal(body: bytes) -> str:
    with pytest.raises(BadRequestError) as caught:
        parse_body(body)
    return str(caught.value)


@pytest.mark.parametrize(
    "document",
    [
        _chat(_audio(_b64(LONG + 8))),
        _chat(_audio(_b64(LONG)), {"type": "text", "text": "hi"}, _audio(_b64(3 * LONG, 1))),
        _chat({"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64," + _b64(LONG)}}),
        [_b64(LONG), {"k": [_b64(LONG, 2), "short", 1, None, True]}],
        {"x" * LONG: "a key is never cut", "y": "y" * LONG},
        {"text": "é" * LONG, "escaped": 'a"b\\c' * (LONG // 5), "u": "\u2028" * LONG},
        {"same": [_b64(LONG)] * 3},  # three equal values: three markers
    ],
    ids=["one", "three", "data-uri", "nested", "key", "not-plain", "repeated"],
)
def test_a_body_with_long_strings_parses_to_json_loads_document(document: object) -> None:
    for body in (
        json.dumps(document).encode(),
        json.dumps(document, indent=1).encode(),
        b"\xef\xbb\xbf" + json.dumps(document, separators=(",", ":")).encode(),
        bytearray(json.dumps(document).encode()),
    ):
        assert parse_body(body) == json.loads(bytes(body).decode("utf-8-sig"))


def test_long_plain_strings_are_cut_and_others_are_not() -> None:
    audio = _b64(LONG)
    body = json.dumps({"a": audio, "b": "x" * (LONG - 1), "c": "é" * LONG}).encode()
    cut, values = _cut_long_strings(body)
    assert list(values.values()) == [audio]
    assert len(cut) < len(body) - LONG + 100


@pytest.mark.parametrize(
    "body",
    [
        # a control character in a long string: json's refusal, at its position
        b'{"a": "' + b"A" * LONG + b'\x01"}',
        # broken JSON after a long string: the position is the body's own
        b'{"a": "' + b"A" * LONG + b'", "b": ]}',
        b'{"a": "' + b"A" * LONG + b'", "a": 1}',  # a duplicate key
        b'{"a": "' + b"A" * LONG,  # unterminated
        b'{"a": "' + b"A" * LONG + b'"} trailing',
        b'{"a": "' + b"A" * LONG + b'\xff"}',  # not UTF-8
        b'"' + b"A" * LONG + b'"' + b'"',
    ],
    ids=["control", "broken", "duplicate", "unterminated", "trailing", "not-utf8", "bare"],
)
def test_a_refused_body_is_refused_as_the_whole_body_is(body: bytes) -> None:
    with pytest.raises(BadRequestError) as whole:  # the body parsed without any cut
        _loads(body)
    assert _refusal(body) == str(whole.value)


def test_a_bare_long_string_is_its_document() -> None:
    value = _b64(LONG)
    assert parse_body(json.dumps(value).encode()) == value


def test_a_lone_surrogate_beside_a_long_string_is_still_refused() -> None:
    body = json.dumps(_chat(_audio(_b64(LONG)), {"type": "text", "text": "\ud800"})).encode()
    assert "surrogate" in _refusal(body)


def test_random_documents_with_long_strings_parse_as_json_does() -> None:
    rng = random.Random(7)
    alphabet = ['"', "\\", "é", "a", "\n", "\x00", "/", "=", " "]

    def value(depth: int) -> object:
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            if rng.random() < 0.3:
                return _b64(LONG + rng.randrange(64) * 4, rng.randrange(1000))
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))
        if roll < 0.6:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randrange(4))}

    for _ in range(40):
        document = value(0)
        body = json.dumps(document, indent=rng.choice([None, 0, 2])).encode()
        assert parse_body(body) == document


# --- the large-body lane ---------------------------------------------------------------


def test_the_lane_holds_at_most_its_width_of_large_bodies() -> None:
    async def scenario() -> list[str]:
        lane = LargeBodyLane(1, wait_s=None)
        events: list[str] = []
        release = asyncio.Event()

        async def request(name: str, nbytes: int | None, read: int) -> None:
            async with lane.ticket() as ticket:
                await ticket.admit(nbytes)
                await ticket.admit(read)  # once read: a chunked body's own length
                events.append(f"{name} in")
                if name == "first":
                    await release.wait()
            events.append(f"{name} out")

        first = asyncio.create_task(request("first", LARGE_BODY_BYTES, LARGE_BODY_BYTES))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(request("second", LARGE_BODY_BYTES, LARGE_BODY_BYTES))
        chunked = asyncio.create_task(request("chunked", None, LARGE_BODY_BYTES))
        small = asyncio.create_task(request("small", 100, 100))
        await small
        assert events == ["first in", "small in", "small out"]
        release.set()
        await asyncio.gather(first, waiting, chunked)
        return events

    events = asyncio.run(scenario())
    assert events[3:5] == ["first out", "second in"]
    assert events.index("chunked in") > events.index("second out")


def test_a_large_body_that_waits_too_long_is_refused_and_gives_nothing_back() -> None:
    async def scenario() -> None:
        lane = LargeBodyLane(1, wait_s=0.01)
        async with lane.ticket() as held:
            await held.admit(LARGE_BODY_BYTES)
            async with lane.ticket() as late:
                with pytest.raises(QueueFullError, match="large request bodies"):
                    await late.admit(LARGE_BODY_BYTES)
                assert not late.held
        # Every place is back: two admits in turn pass at once.
        for _ in range(2):
            async with lane.ticket() as again:
                await again.admit(LARGE_BODY_BYTES)
                assert again.held

    asyncio.run(scenario())


def test_a_cancelled_waiter_takes_no_place() -> None:
    async def scenario() -> None:
        lane = LargeBodyLane(1, wait_s=None)
        async with lane.ticket() as held:
            await held.admit(LARGE_BODY_BYTES)

            async def waiter() -> None:
                async with lane.ticket() as ticket:
                    await ticket.admit(LARGE_BODY_BYTES)

            task = asyncio.create_task(waiter())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        async with lane.ticket() as after:
            async with asyncio.timeout(1):
                await after.admit(LARGE_BODY_BYTES)

    asyncio.run(scenario())


def test_beside_a_small_request_a_place_comes_back_after_a_pause() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        lane = LargeBodyLane(1, wait_s=None, pause_ratio=1.0, max_pause_s=0.05)
        async with lane.ticket() as small:
            await small.admit(100)  # a small request in progress
            async with lane.ticket() as large:
                await large.admit(LARGE_BODY_BYTES)
                await asyncio.sleep(0.02)
            paced = lane._places.locked()  # given back later, not now
            await asyncio.sleep(0.1)
            back = not lane._places.locked()
        async with lane.ticket() as alone:
            await alone.admit(LARGE_BODY_BYTES)
        return paced, back, not lane._places.locked()  # alone: not paced

    assert asyncio.run(scenario()) == (True, True, True)
