"""The refusal delay (issue #33): a request refused from its head on a kept-alive
connection is answered ``refusal_delay_s`` after its head (``--refusal-delay``), so a
client that sends again as soon as it is answered sends one request per delay and
connection; nothing of the connection is read meanwhile but the refused body."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from serverkit import (
    REFUSED_REQUEST,
    LoopbackTransport,
    RefusingAdmission,
    never_app,
)
from uvicorn.config import Config
from uvicorn.server import ServerState

from audiogate.cli import build_parser, main
from audiogate.server import ServerLimits
from audiogate.server.budgets import REFUSAL_DELAY_S
from audiogate.server.options import serve_options
from audiogate.server.protocol import guarded_h11


async def _refused_once(**kw: Any) -> tuple[list[float], LoopbackTransport, Any]:
    """One plain refused request on a guarded connection (``kw``: of ``guarded_h11``):
    the delays (s) the loop was asked to answer it after, the transport, the protocol."""
    loop = asyncio.get_running_loop()
    delays: list[float] = []
    call_at = loop.call_at

    def at(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        if callback.__name__ == "_answer_refusal":
            delays.append(when - loop.time())
        return call_at(when, callback, *args, **kwargs)

    loop.call_at = at  # type: ignore[method-assign]  # asyncio's call_later calls it too
    config = Config(app=never_app, lifespan="off", access_log=False)
    protocol_class = guarded_h11(
        header_timeout_s=5.0,
        max_connections=16,
        admission=RefusingAdmission(),  # type: ignore[arg-type]
        **kw,
    )
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = LoopbackTransport()
    protocol.connection_made(transport)
    protocol.data_received(REFUSED_REQUEST)
    return delays, transport, protocol


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.3])
def test_a_kept_alive_refusal_is_answered_after_the_delay_and_reads_nothing_before(
    delay_s: float,
) -> None:
    async def run() -> tuple[list[float], bytes, tuple[int, int], bytes]:
        delays, transport, protocol = await _refused_once(refusal_delay_s=delay_s)
        protocol.data_received(REFUSED_REQUEST)  # sent again before the answer: kept, not read
        before = bytes(transport.written)
        paused = (transport.pauses, transport.resumes)
        while transport.written.count(b"HTTP/1.1 429") < 2:
            await asyncio.sleep(0.01)
        protocol.connection_lost(None)
        return delays, before, paused, bytes(transport.written)

    delays, before, paused, written = asyncio.run(run())
    # One answer per refused request, each due the delay after its head was read (the
    # second one's head read only once the first was answered).
    assert len(delays) == 2
    assert all(math.isclose(d, delay_s, abs_tol=0.005) for d in delays), delays
    assert before == b""
    assert paused == (1, 0)
    assert written.count(b"retry-after: 1\r\n") == 2
    assert b"connection: close" not in written  # kept alive


def test_the_default_delay_is_the_limits_default() -> None:
    async def run() -> list[float]:
        delays, _, protocol = await _refused_once()
        protocol.connection_lost(None)
        return delays

    (delay,) = asyncio.run(run())
    assert math.isclose(delay, REFUSAL_DELAY_S, abs_tol=0.005)
    assert ServerLimits().refusal_delay_s == REFUSAL_DELAY_S
    assert 0 < REFUSAL_DELAY_S <= 1.0  # at most the answer's Retry-After


def test_serve_passes_its_refusal_delay_to_the_connection_guard(monkeypatch) -> None:
    from audiogate.server import run as run_module

    seen: dict[str, Any] = {}
    monkeypatch.setattr(run_module, "guarded_h11", lambda **kw: seen.update(kw))
    run_module._guarded_protocol(ServerLimits(refusal_delay_s=0.25))
    assert seen["refusal_delay_s"] == 0.25


def test_the_refusal_delay_is_an_option_from_0_to_1_s(capsys) -> None:
    def parsed(*argv: str) -> float:
        args = build_parser().parse_args(["serve", "--model", "m", *argv])
        return serve_options(args).limits.refusal_delay_s

    assert parsed() == REFUSAL_DELAY_S
    assert parsed("--refusal-delay", "0") == 0.0
    assert parsed("--refusal-delay", "0.2") == 0.2
    assert parsed("--refusal-delay", "1") == 1.0
    for bad in ("-0.1", "1.5", "nan", "inf", "soon"):
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "--model", "m", "--refusal-delay", bad])
        assert exit_info.value.code == 2
        assert "argument --refusal-delay" in capsys.readouterr().err
    for value in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="refusal_delay_s"):
            ServerLimits(refusal_delay_s=value)
