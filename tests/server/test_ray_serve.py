"""The reference app on Ray Serve: two replicas answer like the in-process app, and a
killed replica is replaced while the other keeps answering (a local Ray instance)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serverkit import chat, wav_b64

from audiogate.server import ServeOptions, ServerThread, build_app

GEMMA = Path(__file__).parents[2] / "examples" / "models" / "gemma-3n-e4b-it"
NAME = "audiogate"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # Ray's own
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def ray_serve() -> Iterator[str]:
    """Ray Serve on a local Ray instance; the proxy's URL. Always shut down."""
    pytest.importorskip("ray.serve")
    import logging

    import ray
    from ray import serve

    from audiogate.integrations.ray_serve import build_application

    port = _free_port()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = build_application(
            ServeOptions(model_dir=GEMMA),
            num_replicas=2,
            ray_actor_options={"num_cpus": 0.5},
        )
        serve.run(app, name=NAME, route_prefix="/", blocking=False)
        url = f"http://127.0.0.1:{port}"
        _wait_running(2, timeout_s=120)
        yield url
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def _replicas() -> list[str]:
    import ray

    return sorted(
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == "serve" and actor["name"].startswith("SERVE_REPLICA::")
    )


def _running() -> int:
    from ray import serve

    status = serve.status().applications.get(NAME)
    if status is None or NAME not in status.deployments:
        return 0
    deployment = status.deployments[NAME]
    return int(deployment.replica_states.get("RUNNING", 0))


def _wait_running(count: int, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _running() < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} replicas were not running within {timeout_s} s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def reference() -> Iterator[str]:
    """The in-process app ``audiogate serve`` runs."""
    with ServerThread(build_app(ServeOptions(model_dir=GEMMA))) as running:
        yield running.url


BODY = chat(wav_b64(1.0), wav_b64(0.4, rate_hz=44_100))


def test_two_replicas_answer_like_the_in_process_app(ray_serve, reference):
    want = httpx.post(f"{reference}/v1/audio/prepare", json=BODY, timeout=30)
    assert want.status_code == 200
    with httpx.Client(timeout=30) as client:
        for _ in range(6):  # both replicas, routed by Ray
            got = client.post(f"{ray_serve}/v1/audio/prepare", json=BODY)
            assert got.status_code == 200
            assert got.json() == want.json()
        bad = client.post(f"{ray_serve}/v1/audio/prepare", json={"messages": []})
        ref_bad = httpx.post(f"{reference}/v1/audio/prepare", json={"messages": []})
        assert (bad.status_code, bad.json()) == (ref_bad.status_code, ref_bad.json())
        assert client.get(f"{ray_serve}/healthz").json()["status"] == "ok"
        metrics = client.get(f"{ray_serve}/metrics").text
        assert "audiogate_server_prepare_responses_total" in metrics


def test_a_killed_replica_is_replaced_while_the_other_answers(ray_serve):
    import ray

    before = _replicas()
    assert len(before) == 2
    ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
    statuses: list[int] = []
    deadline = time.monotonic() + 120
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < deadline:
            statuses.append(client.post(f"{ray_serve}/v1/audio/prepare", json=BODY).status_code)
            now = _replicas()
            if before[0] not in now and len(now) == 2 and _running() == 2:
                break
        else:
            raise AssertionError(f"the killed replica was not replaced: {_replicas()}")
        # The survivor answered throughout; once replaced, both answer again.
        assert statuses.count(200) >= len(statuses) - 1, statuses
        for _ in range(4):
            assert client.post(f"{ray_serve}/v1/audio/prepare", json=BODY).status_code == 200
