"""Cancellation mid-stream: the stream is closed, the partial body dropped, the error typed."""

from __future__ import annotations

import asyncio

import pytest
from acquire_helpers import (
    WAIT_S,
    LoopbackServer,
    audio_url,
    b64,
    endless,
    input_audio,
    net_policy,
    respond,
    trickle,
    wav,
)

from audiogate.acquire import acquire_parts
from audiogate.acquire.net import CANCEL_POLL_S
from audiogate.cancel import CancelToken
from audiogate.errors import PreprocessCancelled

CLIP = wav(16_000)


def test_cancelling_the_acquiring_task_closes_a_slow_http_stream():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/slow", trickle(CLIP[:1000], content_length=len(CLIP)))
            task = asyncio.create_task(acquire_parts([audio_url(url)], policy=net_policy()))
            await asyncio.wait_for(server.arrived.wait(), WAIT_S)
            exchange = server.exchanges[0]
            await asyncio.wait_for(exchange.first_sent.wait(), WAIT_S)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The origin sees the close long before the body could have been drained.
            await asyncio.wait_for(exchange.closed.wait(), WAIT_S)
            assert exchange.body_sent == 1000 < len(CLIP)

    asyncio.run(scenario())


def test_cancelling_the_task_during_an_endless_stream_stops_reading():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/flood", endless(chunk_bytes=4096))
            task = asyncio.create_task(acquire_parts([audio_url(url)], policy=net_policy()))
            await asyncio.wait_for(server.arrived.wait(), WAIT_S)
            await asyncio.wait_for(server.exchanges[0].first_sent.wait(), WAIT_S)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(server.exchanges[0].closed.wait(), WAIT_S)

    asyncio.run(scenario())


@pytest.mark.parametrize("stage", ["body", "headers"])
def test_a_cancel_token_stops_a_stalled_fetch_with_a_typed_error(stage):
    async def scenario():
        async with LoopbackServer() as server:
            if stage == "body":
                handler = trickle(CLIP[:1000], content_length=len(CLIP))
            else:

                async def handler(ex, writer):  # never answers
                    ex.first_sent.set()
                    await asyncio.wait_for(ex.closed.wait(), WAIT_S * 3)

            url = server.route("/stall", handler)
            token = CancelToken()
            parts = [input_audio(b64(CLIP)), audio_url(url)]
            task = asyncio.create_task(acquire_parts(parts, policy=net_policy(), cancel=token))
            await asyncio.wait_for(server.arrived.wait(), WAIT_S)
            await asyncio.wait_for(server.exchanges[0].first_sent.wait(), WAIT_S)
            token.cancel()
            with pytest.raises(PreprocessCancelled) as caught:
                await asyncio.wait_for(task, WAIT_S)
            assert (caught.value.checkpoint, caught.value.clip_index) == ("Acquisition", 1)
            await asyncio.wait_for(server.exchanges[0].closed.wait(), WAIT_S)

    asyncio.run(scenario())


def test_an_outer_cancellation_is_not_mistaken_for_the_token():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/slow", trickle(b"", content_length=len(CLIP)))
            token = CancelToken()
            task = asyncio.create_task(
                acquire_parts([audio_url(url)], policy=net_policy(), cancel=token)
            )
            await asyncio.wait_for(server.arrived.wait(), WAIT_S)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not token.cancelled

    asyncio.run(scenario())


def test_a_completed_fetch_leaves_no_watcher_behind():
    async def scenario():
        async with LoopbackServer() as server:
            url = server.route("/a.wav", respond(CLIP))
            token = CancelToken()
            await acquire_parts([audio_url(url)], policy=net_policy(), cancel=token)
            token.cancel()  # too late to matter
            await asyncio.sleep(4 * CANCEL_POLL_S)  # a leftover watcher would cancel us now
            current = asyncio.current_task()
            assert current is not None
            assert current.cancelling() == 0

    asyncio.run(scenario())
