"""AudioGate with an AudioWorker counts every request exactly once, whatever ends it."""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path

import pytest

from audiogate import create_host
from audiogate.api import AudioGate
from audiogate.cancel import CancelToken
from audiogate.deprecation import AudioGateDeprecationWarning
from audiogate.errors import (
    AcquisitionError,
    ChatRequestError,
    ContextLimitError,
    LimitError,
    PlaceholderError,
    PreprocessCancelled,
)
from audiogate.metrics import REJECTION_REASONS, AudioMetrics
from audiogate.testing.audio import tone, wav_bytes
from audiogate.worker import AudioWorker

pytest.importorskip("transformers")

GEMMA = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"
FAMILY = "gemma3n"


@pytest.fixture(scope="module")
def gate():
    host = create_host()
    worker = AudioWorker(host, metrics=AudioMetrics())
    with worker:
        yield AudioGate.from_model_dir(GEMMA, host=host, worker=worker, max_prefill_tokens=400)


def outcomes(gate: AudioGate) -> dict[str, float]:
    assert gate.worker is not None
    value = gate.worker.metrics.value
    out = {
        "completed": value("audiogate_audio_preprocess_completed_total", family=FAMILY),
        "cancelled": value("audiogate_audio_preprocess_cancelled_total", family=FAMILY),
    }
    for reason in REJECTION_REASONS:
        out[reason] = value(
            "audiogate_audio_preprocess_rejections_total", family=FAMILY, reason=reason
        )
    return out


def counted(gate: AudioGate, call) -> dict[str, float]:
    """The outcome counters that ``call()`` moved (it may raise)."""
    before = outcomes(gate)
    with contextlib.suppress(Exception):
        call()
    after = outcomes(gate)
    return {k: after[k] - before[k] for k in before if after[k] != before[k]}


def audio_part(seconds: float = 0.5) -> dict:
    data = base64.b64encode(wav_bytes(tone(seconds=seconds), rate_hz=16_000)).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def user(*parts) -> list[dict]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": "What is it?"}]}]


def test_a_success_counts_once_as_completed(gate) -> None:
    assert counted(gate, lambda: gate.prepare(user(audio_part()))) == {"completed": 1}


@pytest.mark.parametrize(
    ("messages", "error", "reason"),
    [
        # Before admission: acquisition, the template, placeholders, the prompt length.
        (
            user({"type": "input_audio", "input_audio": {"data": "@@", "format": "wav"}}),
            AcquisitionError,
            "waveform",
        ),
        (
            [{"role": "user", "content": [audio_part()]}, {"role": "user", "content": "again"}],
            ChatRequestError,
            "waveform",
        ),
        ([{"role": "user", "content": "<audio_soft_token> hi"}], PlaceholderError, "waveform"),
        ([{"role": "user", "content": "word " * 500}], ContextLimitError, "context_limit"),
        # In the worker's admission: counted there, not twice.
        (user(audio_part(31.0)), LimitError, "waveform"),
    ],
    ids=["bad base64", "template refusal", "typed placeholder", "long text", "too long"],
)
def test_a_failure_counts_once_under_its_reason(gate, messages, error, reason) -> None:
    with pytest.raises(error):
        gate.prepare(messages)
    assert counted(gate, lambda: gate.prepare(messages)) == {reason: 1}


def test_a_cancelled_request_counts_once_as_cancelled(gate) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled):
        gate.prepare(user(audio_part()), cancel=token)
    assert counted(gate, lambda: gate.prepare(user(audio_part()), cancel=token)) == {"cancelled": 1}


def test_a_wrong_return_tensors_fails_before_any_work_and_counts_nothing(gate) -> None:
    with pytest.raises(ValueError, match="return_tensors"):
        gate.prepare(user(audio_part()), return_tensors="tf")  # type: ignore[arg-type]
    assert counted(gate, lambda: gate.prepare(user(audio_part()), return_tensors="tf")) == {}


def test_a_text_only_success_is_not_an_audio_request(gate) -> None:
    assert counted(gate, lambda: gate.prepare([{"role": "user", "content": "hi"}])) == {}


def test_a_request_counts_once_as_its_owner_closes_it(gate) -> None:
    # The server's order: prepared first, closed once the answer is admitted or not.
    request = gate.request(user(audio_part()))
    before = outcomes(gate)
    request.run()
    assert outcomes(gate) == before  # not counted until closed
    request.close(cancelled=True)  # its client left before the answer was admitted
    request.close()  # a second close does nothing
    after = outcomes(gate)
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == {"cancelled": 1}


def test_a_request_closed_with_its_answer_counts_as_completed(gate) -> None:
    def run_and_close() -> None:
        with gate.request(user(audio_part())) as request:
            request.run()

    assert counted(gate, run_and_close) == {"completed": 1}


def test_the_0_1_0_outcome_record_still_imports_and_warns() -> None:
    import audiogate.worker

    with pytest.warns(AudioGateDeprecationWarning, match="OutcomeRecord"):
        record_type = audiogate.worker.OutcomeRecord
    with pytest.warns(AudioGateDeprecationWarning, match="outcome_scope"):
        scope = audiogate.worker.outcome_scope
    with scope() as record:
        assert isinstance(record, record_type)


def test_a_request_closed_while_its_job_runs_counts_once_and_frees_its_bytes(
    gate, monkeypatch
) -> None:
    # The server's client leaves while the worker prepares its request: the handler
    # closes it (cancelled) before the job ends; the job's end counts nothing more, and
    # its reservation is held until it stops.
    import threading
    import time

    import audiogate.request as request_module

    started, release = threading.Event(), threading.Event()
    real = request_module.process_planned

    def held(*args, **kwargs):
        started.set()
        assert release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(request_module, "process_planned", held)
    request = gate.request(user(audio_part()))
    failures: list[BaseException] = []

    def run() -> None:
        try:
            request.run()
        except BaseException as exc:
            failures.append(exc)

    before = outcomes(gate)
    runner = threading.Thread(target=run)
    runner.start()
    assert started.wait(20)
    request.close(cancelled=True)
    after = outcomes(gate)
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == {"cancelled": 1}
    assert gate.worker.inflight_host_bytes > 0  # the running job still holds its bytes
    release.set()
    runner.join(20)
    assert [type(f) for f in failures] == [PreprocessCancelled]
    after = outcomes(gate)
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == {"cancelled": 1}
    deadline = time.monotonic() + 20
    while gate.worker.inflight_host_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.worker.inflight_host_bytes == 0
