"""The handler's disconnect watch: the work runs in the handler's own task, a client that
leaves cancels its token and then the work, and the handler's task is left with no
cancellation of the watch's pending (it goes on to answer 499 and count the request)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from audiogate.cancel import CancelToken
from audiogate.server.routes import AudioServer, ClientGone


class _Client:
    """A request whose ``receive`` says ``http.disconnect`` once :meth:`leave` is called."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.receives = 0

    async def receive(self) -> dict[str, Any]:
        self.receives += 1
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self.gone.set()


def _until_disconnect(client: _Client, work: Any, token: CancelToken | None = None) -> Any:
    # The method uses nothing of the server's own state.
    return AudioServer._until_disconnect(None, client, work, token)  # type: ignore[arg-type]


def test_the_work_runs_in_the_handlers_task_and_its_value_comes_back() -> None:
    async def main() -> None:
        handler = asyncio.current_task()
        client = _Client()

        async def work() -> object:
            await asyncio.sleep(0)
            return asyncio.current_task()

        assert await _until_disconnect(client, work()) is handler
        await asyncio.sleep(0)  # the watcher has let go of receive
        assert handler is not None
        assert handler.cancelling() == 0
        assert len(asyncio.all_tasks()) == 1

    asyncio.run(main())


def test_a_client_that_leaves_cancels_the_token_then_the_work() -> None:
    async def main() -> None:
        handler = asyncio.current_task()
        client = _Client()
        token = CancelToken()
        seen: list[bool] = []

        async def work() -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append(token.cancelled)  # the token first, as before the work
                await asyncio.sleep(0)  # letting go may await
                raise

        asyncio.get_running_loop().call_later(0.01, client.leave)
        with pytest.raises(ClientGone):
            await _until_disconnect(client, work(), token)
        assert seen == [True]
        assert handler is not None
        assert handler.cancelling() == 0
        await asyncio.sleep(0.01)  # no cancellation left pending for the handler

    asyncio.run(main())


def test_work_that_ends_despite_the_clients_leaving_is_still_a_client_gone() -> None:
    async def main() -> None:
        client = _Client()
        token = CancelToken()

        async def work() -> int:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return 1  # swallowed: the client is gone all the same
            return 0

        asyncio.get_running_loop().call_later(0.01, client.leave)
        with pytest.raises(ClientGone):
            await _until_disconnect(client, work(), token)
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_handler_cancelled_from_outside_cancels_the_token_and_stays_cancelled() -> None:
    async def main() -> None:
        client = _Client()
        token = CancelToken()

        async def handler() -> None:
            await _until_disconnect(client, asyncio.sleep(30), token)

        task = asyncio.create_task(handler())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert token.cancelled
        assert task.cancelling() == 1  # the outside cancellation, not taken back

    asyncio.run(main())


def test_a_client_that_leaves_after_the_work_changes_nothing() -> None:
    async def main() -> None:
        client = _Client()

        async def work() -> str:
            return "answer"

        assert await _until_disconnect(client, work()) == "answer"
        client.leave()
        await asyncio.sleep(0.01)  # the watcher was cancelled: nothing reaches the handler
        assert await _until_disconnect(_Client(), work()) == "answer"

    asyncio.run(main())
