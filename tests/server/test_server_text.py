"""Requests without audio: the event loop stays free while their template renders and
their text is tokenized, their bytes are reserved on the worker, and text over the limit
is refused before any template sees it."""

from __future__ import annotations

import argparse
import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serverkit import PREPARE, Running, serving, tokenizer, wait_until

from audiogate.chat.prompt_text import MAX_PROMPT_TEXT_BYTES, prompt_text_bytes, text_host_bytes
from audiogate.server.options import add_serve_arguments, serve_options

MODEL = "gemma-3n-e4b-it"


class _HeldRenderer:
    """The checkpoint's template, held (at most 10 s) on a request whose text says
    ``hold`` until :meth:`release`."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.calls = 0

    def __call__(self, messages: Any) -> str:
        self.calls += 1
        if "hold" in str(messages):
            self.entered.set()
            self.released.wait(10)
        text = tokenizer(MODEL).apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
        )
        return str(text)

    def release(self) -> None:
        self.released.set()


def _text(content: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}]}


@pytest.fixture(scope="module")
def held() -> Iterator[tuple[Running, _HeldRenderer]]:
    renderer = _HeldRenderer()
    with serving(MODEL, renderer=renderer, max_prompt_text_bytes=64 * 1024) as running:
        yield running, renderer


def test_healthz_answers_while_a_text_request_renders_and_its_bytes_are_reserved(
    held: tuple[Running, _HeldRenderer],
) -> None:
    running, renderer = held
    body = _text("hold " + "x" * 10_000)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            answer = pool.submit(running.client.post, PREPARE, json=body)
            assert renderer.entered.wait(10)
            # On the event loop, the held template would stall this until released.
            health = httpx.get(running.url + "/healthz", timeout=2.0)
            assert health.status_code == 200
            reserved = text_host_bytes(prompt_text_bytes(body["messages"]))
            assert health.json()["worker"]["inflight_host_bytes"] == reserved
        finally:
            renderer.release()
        response = answer.result()
    assert response.status_code == 200
    assert response.json()["input_ids"]
    running.wait_idle()


def test_text_over_the_limit_is_a_413_before_the_template_renders(
    held: tuple[Running, _HeldRenderer],
) -> None:
    running, renderer = held
    calls = renderer.calls
    before = running.outcomes()
    response = running.client.post(PREPARE, json=_text("x" * 65_536))
    assert response.status_code == 413
    error = response.json()["error"]
    assert (error["type"], error["reason"]) == ("ContextLimitError", "context_limit")
    assert (error["limit"], error["maximum"]) == ("prompt text bytes", 65_536)
    assert renderer.calls == calls
    assert running.outcomes()["context_limit"] == before["context_limit"] + 1
    running.wait_idle()


@pytest.mark.slow
def test_a_large_text_request_does_not_stall_other_connections() -> None:
    # The real template and tokenizer on 1 MiB of text (about 1 s of tokenizing with
    # the example vocabulary): /healthz keeps answering meanwhile.
    gate_text = "a " * (512 * 1024 - 16)
    with serving(MODEL) as running:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(running.client.post, PREPARE, json=_text(gate_text))
            wait_until(lambda: running.worker.inflight_host_bytes > 0, 10)
            # Ordering, not timing: /healthz is answered again and again while the
            # request is still in flight. Tokenizing on the event loop would hold every
            # health check until the tokenizer returned, and the request with them.
            answered_in_flight = 0
            while running.worker.inflight_host_bytes > 0 and answered_in_flight < 3:
                health = httpx.get(running.url + "/healthz", timeout=60.0)
                assert health.status_code == 200
                answered_in_flight += not answer.done()
            response = answer.result()
        assert response.status_code == 200
        assert answered_in_flight >= 2, answered_in_flight
        running.wait_idle()


def test_serve_takes_the_text_cap() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--model", "m", "--max-prompt-text-bytes", "64KiB"])
    assert serve_options(args).max_prompt_text_bytes == 64 * 1024
    default = serve_options(parser.parse_args(["--model", "m"])).max_prompt_text_bytes
    assert default == MAX_PROMPT_TEXT_BYTES
