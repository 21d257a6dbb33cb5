"""Request bodies (core/audiogate/server/requests.py): long plain strings (base64
uploads) are cut out before ``json`` scans the body and put back after, which must give
``json.loads``'s document, and its refusals, for any body; large bodies take a place in
the large-body lane, which bounds how many are worked on at once."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import random
from collections.abc import AsyncIterator

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


@contextlib.asynccontextmanager
async def _small_in_progress(lane: LargeBodyLane) -> AsyncIterator[None]:
    """A small request in progress: the lane's limit holds."""
    async with lane.ticket() as small:
        await small.admit(100)
        yield


def test_the_lane_holds_at_most_its_width_of_large_bodies() -> None:
    async def scenario() -> list[str]:
        lane = LargeBodyLane(1, wait_s=None)
        events: list[str] = []
        release = asyncio.Event()
        async with lane.ticket() as keeper:
            await keeper.admit(100)  # a small request in progress throughout: the limit holds
            return await around(lane, events, release)

    async def around(lane: LargeBodyLane, events: list[str], release: asyncio.Event) -> list[str]:

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
        lane = LargeBodyLane(1, wait_s=0.01, pause_ratio=0.0)
        async with _small_in_progress(lane), lane.ticket() as held:
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
        lane = LargeBodyLane(1, wait_s=None, pause_ratio=0.0)
        async with _small_in_progress(lane), lane.ticket() as held:
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
            paced = lane.free == 0  # given back later, not now
            await asyncio.sleep(0.1)
            back = lane.free == 1
        async with lane.ticket() as alone:
            await alone.admit(LARGE_BODY_BYTES)
        return paced, back, lane.free == 1  # alone: not paced

    assert asyncio.run(scenario()) == (True, True, True)


async def _large(lane: LargeBodyLane, name: str, events: list[str], leave: asyncio.Event) -> None:
    async with lane.ticket() as ticket:
        await ticket.admit(LARGE_BODY_BYTES)
        events.append(f"{name} in")
        await leave.wait()
    events.append(f"{name} out")


def test_large_bodies_alone_take_every_place() -> None:
    # #31: a workload of large bodies only (vLLM render's 1.28 MB requests) is not
    # serialized; there is no small request to protect.
    async def scenario() -> list[str]:
        lane = LargeBodyLane(1, wait_s=None)
        events: list[str] = []
        leave = asyncio.Event()
        tasks = [asyncio.create_task(_large(lane, n, events, leave)) for n in ("a", "b", "c")]
        while len(events) < 3:
            await asyncio.sleep(0)
        leave.set()
        await asyncio.gather(*tasks)
        return events

    events = asyncio.run(scenario())
    assert events[:3] == ["a in", "b in", "c in"]


def test_a_small_request_brings_the_limit_back_for_large_bodies_that_come_after() -> None:
    async def scenario() -> list[str]:
        lane = LargeBodyLane(1, wait_s=None, recent_s=math.inf)
        events: list[str] = []
        first, second = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(_large(lane, n, events, first)) for n in ("a", "b")]
        while len(events) < 2:
            await asyncio.sleep(0)
        async with lane.ticket() as small:
            await small.admit(100)
            events.append("small in")
        late = asyncio.create_task(_large(lane, "c", events, second))
        for _ in range(20):
            await asyncio.sleep(0)
        events.append("release a, b")
        first.set()
        await asyncio.gather(*tasks)
        while "c in" not in events:
            await asyncio.sleep(0)
        second.set()
        await late
        return events

    events = asyncio.run(scenario())
    # c waits (a small request was seen) until fewer than one large body is in progress.
    assert events.index("c in") > events.index("b out") > events.index("release a, b")


def test_the_limit_lapses_once_no_small_request_was_seen_for_recent_s() -> None:
    async def scenario() -> list[str]:
        lane = LargeBodyLane(1, wait_s=None, pause_ratio=0.0, recent_s=0.01)
        events: list[str] = []
        first, second = asyncio.Event(), asyncio.Event()
        async with lane.ticket() as small:
            await small.admit(100)
            holder = asyncio.create_task(_large(lane, "a", events, first))
            while not events:
                await asyncio.sleep(0)
            waiter = asyncio.create_task(_large(lane, "b", events, second))
            for _ in range(20):
                await asyncio.sleep(0)
            events.append("small out")
        async with asyncio.timeout(30):
            while "b in" not in events:
                await asyncio.sleep(0.005)
        first.set()
        second.set()
        await asyncio.gather(holder, waiter)
        return events

    events = asyncio.run(scenario())
    # b waited while the small request was in progress, and came in after the limit
    # lapsed, while a still held its place.
    assert events.index("small out") < events.index("b in") < events.index("a out")


def test_a_waiter_refused_after_wait_s_while_small_requests_run() -> None:
    async def scenario() -> int:
        lane = LargeBodyLane(1, wait_s=0.01, pause_ratio=0.0, recent_s=math.inf)
        async with lane.ticket() as small:
            await small.admit(100)
            async with lane.ticket() as held:
                await held.admit(LARGE_BODY_BYTES)
                async with lane.ticket() as late:
                    with pytest.raises(QueueFullError, match=r"waited 0\.01 s"):
                        await late.admit(LARGE_BODY_BYTES)
                    assert not late.held
        return lane.free

    assert asyncio.run(scenario()) == 1


def test_a_refused_large_body_is_not_a_small_request_leaving() -> None:
    # The limit lapses recent_s after the last *small* request left; a large body that
    # leaves without a place (refused, or its client gone) must not prolong it.
    async def scenario() -> tuple[float, float]:
        lane = LargeBodyLane(1, wait_s=0.01, pause_ratio=0.0, recent_s=math.inf)
        async with _small_in_progress(lane), lane.ticket() as held:
            await held.admit(LARGE_BODY_BYTES)
        small_left = lane._small_left
        async with _small_in_progress(lane), lane.ticket() as held:
            await held.admit(LARGE_BODY_BYTES)
            before = lane._small_left
            async with lane.ticket() as late:
                with pytest.raises(QueueFullError):
                    await late.admit(LARGE_BODY_BYTES)
                assert late.large
                assert not late.held
            after = lane._small_left
        assert lane._small_left > small_left  # the small one's leaving counted
        return before, after

    before, after = asyncio.run(scenario())
    assert after == before
