"""The bounded worker: reservations released exactly once on every path, backpressure,
FIFO, queue full, plugin failures, asyncio cancellation, metrics counted once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import random
import threading
import time
import weakref
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from toyfamily import ToyFamily, toy_policy

from audiogate import create_host
from audiogate.cancel import NEVER, CancelToken
from audiogate.errors import (
    AudioGateError,
    ContextLimitError,
    FeatureError,
    MemoryLimitError,
    PluginError,
    PreprocessCancelled,
    QueueFullError,
    WorkerUnavailableError,
)
from audiogate.metrics import REJECTION_REASONS, AudioMetrics
from audiogate.pipeline import EncodedClip
from audiogate.testing.audio import tone, wav_bytes
from audiogate.worker import AudioWorker, WorkerLimits

FAMILY = "toyfam"


def clip(samples: int = 1_600, ordinal: int = 1) -> EncodedClip:
    return EncodedClip(data=wav_bytes(tone(samples=samples), rate_hz=16_000), ordinal=ordinal)


def make_worker(family: ToyFamily | None = None, **limits) -> tuple[AudioWorker, ToyFamily]:
    family = family or ToyFamily()
    host = create_host(load_entry_points=False, plugins=[family])
    worker = AudioWorker(host, limits=WorkerLimits(**limits), metrics=AudioMetrics())
    return worker, family


def gauges_are_zero(worker: AudioWorker) -> bool:
    m = worker.metrics
    return (
        worker.queued_encoded_bytes == 0
        and worker.inflight_host_bytes == 0
        and m.value("audiogate_audio_preprocess_queued_bytes") == 0
        and m.value("audiogate_audio_preprocess_inflight_host_bytes") == 0
    )


def count(worker: AudioWorker, name: str, **labels: str) -> float:
    return worker.metrics.value(name, family=FAMILY, **labels)


def rejections(worker: AudioWorker, reason: str) -> float:
    return count(worker, "audiogate_audio_preprocess_rejections_total", reason=reason)


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def test_a_job_completes_and_hand_off_releases_its_reservation() -> None:
    worker, _ = make_worker()
    with worker:
        job = worker.submit(toy_policy(), [clip()])
        assert job.reservation.encoded_bytes == len(clip().data)
        assert job.reservation.host_bytes > 0
        batch = job.result(timeout=5)
        assert batch.totals.frames == 10
        assert job.reservation.released
        assert gauges_are_zero(worker)
        assert count(worker, "audiogate_audio_preprocess_completed_total") == 1
        assert count(worker, "audiogate_audio_source_samples_total") == 1_600
        assert count(worker, "audiogate_audio_feature_frames_total") == 10
        assert count(worker, "audiogate_audio_effective_tokens_total") == 5
        assert count(worker, "audiogate_audio_preprocess_latency_seconds_total") > 0


def test_reservation_is_held_until_the_result_is_taken() -> None:
    worker, _ = make_worker()
    with worker:
        job = worker.submit(toy_policy(), [clip()])
        wait_until(job.done)
        assert not job.reservation.released
        assert worker.queued_encoded_bytes == job.reservation.encoded_bytes
        job.result()
        assert gauges_are_zero(worker)


@pytest.mark.slow
def test_a_consumer_that_went_away_releases_on_garbage_collection() -> None:
    worker, _ = make_worker()
    with worker:
        job = worker.submit(toy_policy(), [clip()])
        wait_until(job.done)
        assert worker.inflight_host_bytes > 0
        del job
        gc.collect()
        wait_until(lambda: gauges_are_zero(worker))


def test_jobs_complete_in_fifo_order() -> None:
    order: list[int] = []
    lock = threading.Lock()
    worker, _family = make_worker(queue_depth=40, result_depth=40)
    with worker:
        jobs = []
        for i in range(32):

            def finish(batch, i=i):
                with lock:
                    order.append(i)
                return batch

            jobs.append(worker.submit(toy_policy(), [clip()], finish=finish))
        for job in jobs:
            job.result(timeout=10)
        assert order == list(range(32))
        assert count(worker, "audiogate_audio_preprocess_completed_total") == 32
        assert count(worker, "audiogate_audio_effective_tokens_total") == 32 * 5
        assert gauges_are_zero(worker)


def test_queue_full_is_refused_and_releases_its_reservation() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), queue_depth=2)
    with worker:
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)  # picked up, blocked on the gate
        queued = [worker.submit(toy_policy(), [clip()]) for _ in range(2)]
        held = worker.queued_encoded_bytes
        with pytest.raises(QueueFullError, match="queue is full"):
            worker.submit(toy_policy(), [clip()])
        assert worker.queued_encoded_bytes == held
        assert rejections(worker, "queue_full") == 1
        gate.set()
        for job in [running, *queued]:
            job.result(timeout=5)
        assert gauges_are_zero(worker)


def test_byte_caps_refuse_with_memory_limit_and_roll_back() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), max_queued_encoded_bytes=8_000)
    with worker:
        first = worker.submit(toy_policy(), [clip()])
        with pytest.raises(MemoryLimitError, match="queued encoded bytes"):
            worker.submit(toy_policy(), [clip(), clip(ordinal=2)])
        assert worker.queued_encoded_bytes == first.reservation.encoded_bytes
        gate.set()
        first.result(timeout=5)
    host_capped, _ = make_worker(max_inflight_host_bytes=1_000)
    with host_capped, pytest.raises(MemoryLimitError, match="in-flight host bytes"):
        host_capped.submit(toy_policy(), [clip()])
    assert gauges_are_zero(host_capped)
    assert rejections(host_capped, "memory_limit") == 1


def test_backpressure_third_job_waits_until_the_first_result_is_consumed() -> None:
    started: list[int] = []
    family = ToyFamily(on_extract=lambda _i: started.append(len(started)))
    worker, _ = make_worker(family, result_depth=2)
    with worker:
        jobs = [worker.submit(toy_policy(), [clip()]) for _ in range(3)]
        wait_until(lambda: jobs[0].done() and jobs[1].done())
        time.sleep(0.1)
        assert len(started) == 2
        assert not jobs[2].done()
        jobs[0].result()
        jobs[2].result(timeout=5)
        assert len(started) == 3
        jobs[1].result()
        assert gauges_are_zero(worker)


def test_a_plugin_that_raises_is_feature_panic_and_the_worker_stays_healthy() -> None:
    def fail(index: int) -> BaseException | None:
        return ZeroDivisionError("division by zero in a frontend") if fail.armed else None

    fail.armed = True  # type: ignore[attr-defined]
    worker, _ = make_worker(ToyFamily(fail_with=fail))
    with worker:
        with pytest.raises(PluginError, match="ZeroDivisionError") as info:
            worker.prepare(toy_policy(), [clip()], timeout=5)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        assert rejections(worker, "feature_panic") == 1
        fail.armed = False  # type: ignore[attr-defined]
        assert worker.prepare(toy_policy(), [clip()], timeout=5).totals.frames == 10
        assert gauges_are_zero(worker)


def test_typed_failures_count_under_their_own_reasons() -> None:
    worker, _ = make_worker(ToyFamily(fail_with=lambda i: FeatureError("bad", clip_index=i)))
    with worker:
        with pytest.raises(FeatureError):
            worker.prepare(toy_policy(), [clip()], timeout=5)
        assert rejections(worker, "feature") == 1
    worker, _ = make_worker()
    with worker:
        with pytest.raises(ContextLimitError):
            worker.prepare(
                toy_policy(),
                [clip()],
                finish=lambda batch: (_ for _ in ()).throw(
                    ContextLimitError("prefill tokens", actual=3, maximum=2)
                ),
                timeout=5,
            )
        assert rejections(worker, "context_limit") == 1
        with pytest.raises(Exception, match="duration samples"):
            worker.submit(
                toy_policy(max_samples_per_clip=100, max_duration_seconds=1), [clip(1_600)]
            )
        assert rejections(worker, "waveform") == 1
        assert gauges_are_zero(worker)


def test_cancel_while_queued_never_starts() -> None:
    gate = threading.Event()
    family = ToyFamily(gate=gate)
    worker, _ = make_worker(family)
    with worker:
        blocker = worker.submit(toy_policy(), [clip()])
        queued = worker.submit(toy_policy(), [clip()])
        queued.cancel()
        gate.set()
        blocker.result(timeout=5)
        with pytest.raises(PreprocessCancelled, match="Queue"):
            queued.result(timeout=5)
        assert family.extracted == [0]
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
        assert gauges_are_zero(worker)


def test_cancel_while_running_stops_at_the_feature_checkpoint() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate))
    with worker:
        job = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)
        time.sleep(0.05)
        job.cancel()
        with pytest.raises(PreprocessCancelled, match="Feature"):
            job.result(timeout=5)
        assert gauges_are_zero(worker)


def test_already_cancelled_token_is_refused_at_submit() -> None:
    worker, _ = make_worker()
    token = CancelToken()
    token.cancel()
    with worker, pytest.raises(PreprocessCancelled, match="Queue"):
        worker.submit(toy_policy(), [clip()], cancel=token)
    assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1


def test_asyncio_task_cancellation_cancels_the_job() -> None:
    gate = threading.Event()
    worker, _family = make_worker(ToyFamily(gate=gate))

    async def main() -> None:
        token = CancelToken()
        task = asyncio.create_task(worker.prepare_async(toy_policy(), [clip()], cancel=token))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert token.cancelled
        result = await worker.prepare_async(toy_policy(), [clip()]) if gate.set() is None else None
        assert result.totals.frames == 10

    with worker:
        asyncio.run(main())
        wait_until(lambda: gauges_are_zero(worker))
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1


def test_shutdown_fails_queued_jobs_and_refuses_new_ones() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate))
    running = worker.submit(toy_policy(), [clip()])
    wait_until(lambda: worker.queued_jobs == 0)
    queued = worker.submit(toy_policy(), [clip()])
    closer = threading.Thread(target=worker.close)
    closer.start()
    with pytest.raises(WorkerUnavailableError):
        queued.result(timeout=5)
    gate.set()
    closer.join(5)
    running.result(timeout=5)
    with pytest.raises(WorkerUnavailableError):
        worker.submit(toy_policy(), [clip()])
    assert gauges_are_zero(worker)
    assert rejections(worker, "worker_unavailable") == 2


def test_metrics_export_every_reason_and_no_all_line() -> None:
    registry = CollectorRegistry()
    metrics = AudioMetrics(registry, families=[FAMILY])
    text = generate_latest(registry).decode()
    for reason in REJECTION_REASONS:
        line = f'rejections_total{{family="{FAMILY}",reason="{reason}"}} 0.0'
        assert f"audiogate_audio_preprocess_{line}" in text
    assert 'reason="all"' not in text
    for name in (
        "audiogate_audio_source_seconds_total",
        "audiogate_audio_source_samples_total",
        "audiogate_audio_normalized_samples_total",
        "audiogate_audio_feature_frames_total",
        "audiogate_audio_effective_tokens_total",
        "audiogate_audio_effective_prefill_tokens_total",
        "audiogate_audio_preprocess_latency_seconds_total",
        "audiogate_audio_preprocess_cancelled_total",
        "audiogate_audio_preprocess_queued_bytes",
        "audiogate_audio_preprocess_inflight_host_bytes",
    ):
        assert name in text
    with pytest.raises(ValueError, match="unknown rejection reason"):
        metrics.record_rejection(FAMILY, "all")


@pytest.mark.slow
def test_soak_randomized_requests_cancels_and_failures_leave_nothing_behind() -> None:
    rng = random.Random(1234)

    def maybe_fail(index: int) -> BaseException | None:
        roll = rng.random()
        if roll < 0.05:
            return RuntimeError("random plugin crash")
        if roll < 0.10:
            return FeatureError("random feature refusal", clip_index=index)
        return None

    worker, _ = make_worker(
        ToyFamily(fail_with=maybe_fail),
        queue_depth=6,
        result_depth=3,
        threads=2,
        max_queued_encoded_bytes=400_000,
    )
    submitted = 0
    taken = 0
    outstanding = []
    with worker:
        for i in range(2_000):
            n_clips = rng.randint(1, 3)
            request = [clip(rng.choice([400, 1_600, 8_000]), ordinal=k + 1) for k in range(n_clips)]
            policy = toy_policy(max_clips=2) if rng.random() < 0.05 else toy_policy()
            submitted += 1
            try:
                job = worker.submit(policy, request)
            except AudioGateError:
                continue
            if rng.random() < 0.2:
                job.cancel()
            outstanding.append(job)
            if len(outstanding) > 4 or i % 7 == 0:
                victim = outstanding.pop(0)
                if rng.random() < 0.1:
                    del victim  # consumer went away
                else:
                    try:
                        victim.result(timeout=10)
                        taken += 1
                    except AudioGateError:  # a TimeoutError (a stuck worker) fails the test
                        pass
        for job in outstanding:
            with contextlib.suppress(AudioGateError):
                job.result(timeout=10)
        del outstanding, job
        gc.collect()
        wait_until(lambda: gauges_are_zero(worker), timeout=10)
    completed = count(worker, "audiogate_audio_preprocess_completed_total")
    cancelled = count(worker, "audiogate_audio_preprocess_cancelled_total")
    rejected = sum(rejections(worker, reason) for reason in REJECTION_REASONS)
    assert completed + cancelled + rejected == submitted
    assert rejections(worker, "feature_panic") > 0
    assert rejections(worker, "feature") > 0
    assert cancelled > 0
    assert completed > 0
    assert taken > 0


def threads_gone(worker: AudioWorker) -> bool:
    return not set(worker._threads) & set(threading.enumerate())


@contextlib.contextmanager
def opened_on_exit(gate: threading.Event):
    """Open ``gate`` when the block ends, so a failing test does not hang in close()."""
    try:
        yield
    finally:
        gate.set()


def closes_within(worker: AudioWorker, seconds: float = 5.0) -> bool:
    closer = threading.Thread(target=worker.close, daemon=True)
    closer.start()
    closer.join(seconds)
    return not closer.is_alive()


def test_close_returns_with_more_threads_than_queue_slots_and_an_untaken_result() -> None:
    worker, _ = make_worker(threads=2, queue_depth=1, result_depth=1)
    job = worker.submit(toy_policy(), [clip()])
    wait_until(job.done)
    time.sleep(0.1)  # the second thread now waits for the only result slot
    assert closes_within(worker)
    assert threads_gone(worker)
    assert job.result(timeout=1).totals.frames == 10
    assert gauges_are_zero(worker)


def test_close_of_idle_workers_with_many_threads_and_a_short_queue_returns() -> None:
    for i in range(10):
        worker, _ = make_worker(threads=8, queue_depth=1)
        time.sleep(0.01 * (i % 4))
        assert closes_within(worker)
        assert threads_gone(worker)


def test_cancelling_a_queued_job_frees_its_reservation_and_queue_slot_at_once() -> None:
    gate = threading.Event()
    family = ToyFamily(gate=gate)
    worker, _ = make_worker(family, queue_depth=1)
    with worker, opened_on_exit(gate):
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)
        queued = worker.submit(toy_policy(), [clip()])
        queued.cancel()
        assert queued.done()
        assert queued.reservation.released
        assert worker.queued_jobs == 0
        assert worker.queued_encoded_bytes == running.reservation.encoded_bytes
        assert worker.inflight_host_bytes == running.reservation.host_bytes
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
        with pytest.raises(PreprocessCancelled, match="Queue"):
            queued.result()
        replacement = worker.submit(toy_policy(), [clip()])  # not QueueFullError
        gate.set()
        running.result(timeout=5)
        replacement.result(timeout=5)
        assert family.extracted == [0, 0]
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
        assert rejections(worker, "queue_full") == 0
        assert gauges_are_zero(worker)


def test_a_queued_job_cancelled_through_its_token_alone_is_withdrawn() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), queue_depth=1)
    with worker, opened_on_exit(gate):
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)
        token = CancelToken()
        queued = worker.submit(toy_policy(), [clip()], cancel=token)
        token.cancel()  # its on_cancel callback withdraws it, on this thread
        assert queued.done()
        assert queued.reservation.released
        swept = worker.submit(toy_policy(), [clip()])  # its queue place is free
        swept.cancel_token.cancel()
        assert swept.done()
        assert worker.queued_jobs == 0
        assert worker.queued_encoded_bytes == running.reservation.encoded_bytes
        gate.set()
        running.result(timeout=5)
        for job in (queued, swept):
            with pytest.raises(PreprocessCancelled, match="Queue"):
                job.result()
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 2
        assert gauges_are_zero(worker)


def test_asyncio_cancellation_of_a_queued_job_releases_it_at_once() -> None:
    gate = threading.Event()
    worker, family = make_worker(ToyFamily(gate=gate))

    async def main() -> None:
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)
        task = asyncio.create_task(worker.prepare_async(toy_policy(), [clip()]))
        await asyncio.sleep(0.05)
        assert worker.queued_jobs == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert worker.queued_jobs == 0
        assert worker.queued_encoded_bytes == running.reservation.encoded_bytes
        gate.set()
        running.result(timeout=5)

    with worker:
        with opened_on_exit(gate):
            asyncio.run(main())
        assert gauges_are_zero(worker)
        assert family.extracted == [0]
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1


def test_many_jobs_cancelled_while_queued_from_many_threads_release_everything() -> None:
    gate = threading.Event()
    family = ToyFamily(gate=gate)
    worker, _ = make_worker(family, threads=2, queue_depth=64, result_depth=2)
    with worker, opened_on_exit(gate):
        running = [worker.submit(toy_policy(), [clip()]) for _ in range(2)]
        wait_until(lambda: worker.queued_jobs == 0)
        queued = [worker.submit(toy_policy(), [clip()]) for _ in range(60)]
        start = threading.Barrier(6)

        def cancel_share(share: list) -> None:
            start.wait()
            for k, job in enumerate(share):
                job.cancel() if k % 2 else job.cancel_token.cancel()

        cancellers = [threading.Thread(target=cancel_share, args=(queued[i::6],)) for i in range(6)]
        for canceller in cancellers:
            canceller.start()
        for canceller in cancellers:
            canceller.join(5)
        wait_until(lambda: all(job.done() for job in queued), timeout=2)
        assert worker.queued_jobs == 0
        assert worker.queued_encoded_bytes == sum(j.reservation.encoded_bytes for j in running)
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 60
        gate.set()
        for job in running:
            job.result(timeout=5)
        for job in queued:
            with pytest.raises(PreprocessCancelled, match="Queue"):
                job.result()
        assert len(family.extracted) == 2
        assert gauges_are_zero(worker)
        assert closes_within(worker)
        assert threads_gone(worker)


def test_cancel_racing_the_dequeue_releases_and_counts_each_job_once() -> None:
    rng = random.Random(99)
    worker, _ = make_worker(threads=3, queue_depth=32, result_depth=4)
    jobs = []
    timers = []
    for _ in range(400):
        job = worker.submit(toy_policy(), [clip(400)])
        jobs.append(job)
        delay = rng.choice([0.0, 0.0, 0.0002, 0.001])
        cancel = job.cancel if rng.random() < 0.5 else job.cancel_token.cancel
        timers.append(threading.Timer(delay, cancel))
        timers[-1].start()
        if len(jobs) > 16:
            with contextlib.suppress(PreprocessCancelled):
                jobs.pop(0).result(timeout=5)
        assert worker.queued_encoded_bytes >= 0
        assert worker.inflight_host_bytes >= 0
    for job in jobs:
        with contextlib.suppress(PreprocessCancelled):
            job.result(timeout=5)
    for timer in timers:
        timer.join(5)
    del jobs, job, timers, cancel
    completed = count(worker, "audiogate_audio_preprocess_completed_total")
    cancelled = count(worker, "audiogate_audio_preprocess_cancelled_total")
    assert completed + cancelled == 400
    assert cancelled > 0
    assert gauges_are_zero(worker)
    assert closes_within(worker)
    assert threads_gone(worker)


def test_a_request_cancelled_while_its_prompt_is_expanded_counts_as_cancelled() -> None:
    worker, _ = make_worker()
    token = CancelToken()

    def finish(batch):
        token.cancel()  # the client leaves while finish() runs
        return batch

    with worker:
        job = worker.submit(toy_policy(), [clip()], finish=finish, cancel=token)
        with pytest.raises(PreprocessCancelled):
            job.result(timeout=5)
        assert count(worker, "audiogate_audio_preprocess_completed_total") == 0
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
        wait_until(lambda: gauges_are_zero(worker))


def test_a_prepare_that_times_out_cancels_its_job() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), threads=1)
    with worker, opened_on_exit(gate):
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)  # the thread holds it, blocked
        with pytest.raises(TimeoutError):
            worker.prepare(toy_policy(), [clip()], timeout=0.05)  # queued behind it
        # Withdrawn at once: only the running job still holds bytes.
        assert worker.queued_jobs == 0
        assert worker.queued_encoded_bytes == running.reservation.encoded_bytes
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
        gate.set()
        running.result(timeout=5)
        assert count(worker, "audiogate_audio_preprocess_completed_total") == 1
        wait_until(lambda: gauges_are_zero(worker))


def test_a_job_cancelled_during_its_admission_is_withdrawn_once_queued() -> None:
    class CancelledOnRegistration(CancelToken):
        # Cancelled after the admission's checks, before the job is queued: the
        # callback runs at once (the job is not queued yet), so submit checks again.
        def on_cancel(self, callback):
            self.cancel()
            return super().on_cancel(callback)

    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), threads=1)
    with worker, opened_on_exit(gate):
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)  # the thread holds it, blocked
        job = worker.submit(toy_policy(), [clip()], cancel=CancelledOnRegistration())
        assert job.done()
        assert job.reservation.released
        assert worker.queued_jobs == 0
        with pytest.raises(PreprocessCancelled, match="Queue"):
            job.result()
        gate.set()
        running.result(timeout=5)
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
        wait_until(lambda: gauges_are_zero(worker))


def test_cancelling_a_queued_jobs_future_withdraws_it_and_frees_every_slot() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), threads=1, result_depth=1)
    with worker, opened_on_exit(gate):
        running = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)
        queued = worker.submit(toy_policy(), [clip()])
        assert queued.future.cancel()  # what asyncio.wrap_future does for a cancelled task
        assert worker.queued_jobs == 0  # withdrawn at once, not when a thread reaches it
        assert queued.reservation.released
        with pytest.raises(concurrent.futures.CancelledError):
            queued.result()
        gate.set()
        running.result(timeout=5)
        # The single result slot is free again: the next job runs.
        worker.submit(toy_policy(), [clip()]).result(timeout=5)
        assert count(worker, "audiogate_audio_preprocess_cancelled_total") == 1
    assert gauges_are_zero(worker)


def test_the_never_token_still_allows_timeouts() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate))
    with worker, opened_on_exit(gate), pytest.raises(TimeoutError):
        worker.prepare(toy_policy(), [clip()], cancel=NEVER, timeout=0.2)


def test_a_raising_cancel_callback_does_not_keep_a_job_queued() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), queue_depth=1)
    with worker, opened_on_exit(gate):
        worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)
        token = CancelToken()

        def cleanup() -> None:
            raise RuntimeError("user cleanup failed")

        token.on_cancel(cleanup)  # registered before the worker's own callback
        queued = worker.submit(toy_policy(), [clip()], cancel=token)
        with pytest.raises(RuntimeError, match="user cleanup"):
            token.cancel()
        assert queued.done()
        assert worker.queued_jobs == 0
        gate.set()


def test_a_failure_outside_the_jobs_error_handling_does_not_kill_the_thread() -> None:
    class BrokenMetrics(AudioMetrics):
        failures = 1

        def record_completed(self, family: str, **kwargs) -> None:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("metrics backend down")
            super().record_completed(family, **kwargs)

    family = ToyFamily()
    host = create_host(load_entry_points=False, plugins=[family])
    worker = AudioWorker(host, limits=WorkerLimits(threads=1), metrics=BrokenMetrics())
    with worker:
        broken = worker.submit(toy_policy(), [clip()])
        with pytest.raises(PluginError, match="metrics backend down"):
            broken.result(timeout=5)
        assert broken.reservation.released
        worker.submit(toy_policy(), [clip()]).result(timeout=5)  # the thread lives on
        assert rejections(worker, "feature_panic") == 1


def test_a_negative_prefill_length_from_finish_is_ignored() -> None:
    worker, _ = make_worker()
    with worker:
        value = SimpleNamespace(prefill_positions=-1)
        assert worker.submit(toy_policy(), [clip()], finish=lambda b: value).result(5) is value


def test_a_task_cancelled_after_its_job_ended_releases_the_job() -> None:
    # A client gone at the last moment: its job has finished, its task not yet resumed.
    # The cancelled tasks stay referenced (as by a later gather), with their tracebacks.
    worker, _ = make_worker(result_depth=2)
    jobs: list[weakref.ref] = []
    submit = worker.submit

    def spy(*args, **kwargs):
        job = submit(*args, **kwargs)
        jobs.append(weakref.ref(job))
        return job

    async def main() -> None:
        tasks = []
        for _ in range(2):
            task = asyncio.ensure_future(worker.prepare_async(toy_policy(), [clip()]))
            tasks.append(task)
            await asyncio.sleep(0)  # the task submits and awaits its job
            while not jobs[-1]().done():  # the job ends while the loop is busy
                time.sleep(0.002)
            task.cancel()
        tasks.append(asyncio.ensure_future(worker.prepare_async(toy_policy(), [clip()])))
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert not isinstance(done[-1], BaseException)

    worker.submit = spy  # type: ignore[method-assign]
    with worker:
        asyncio.run(main())
    assert gauges_are_zero(worker)


def test_a_plugin_error_with_a_reason_of_its_own_counts_as_feature_panic() -> None:
    class ModelSpecificError(AudioGateError):
        reason = "model_specific"  # a plugin's own error class

    worker, _ = make_worker(ToyFamily(fail_with=lambda i: ModelSpecificError("odd")), threads=1)
    with worker:
        with pytest.raises(ModelSpecificError):
            worker.submit(toy_policy(), [clip()]).result(timeout=5)
        assert rejections(worker, "feature_panic") == 1
    assert gauges_are_zero(worker)


def test_a_failed_job_is_freed_without_the_cycle_collector() -> None:
    worker, _ = make_worker(ToyFamily(fail_with=lambda i: FeatureError("nope", clip_index=i)))
    gc.disable()
    try:
        with worker:
            job = worker.submit(toy_policy(), [clip()])
            ref = weakref.ref(job)
            with pytest.raises(FeatureError):
                job.result(timeout=5)
            del job
            # No cycle through the stored error's traceback: with the collector off, the
            # job goes once the worker thread has left the frame that ran it (which may
            # be a moment after the result is set, on a loaded machine).
            wait_until(lambda: ref() is None)

            async def main() -> weakref.ref:
                refs = []
                submit = worker.submit

                def spy(*args, **kwargs):
                    job = submit(*args, **kwargs)
                    refs.append(weakref.ref(job))
                    return job

                worker.submit = spy  # type: ignore[method-assign]
                with pytest.raises(FeatureError):
                    await worker.prepare_async(toy_policy(), [clip()])
                return refs[0]

            async_ref = asyncio.run(main())
            wait_until(lambda: async_ref() is None)
    finally:
        gc.enable()


@pytest.mark.slow
def test_every_close_with_wait_waits_for_the_threads() -> None:
    gate = threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), threads=1)
    job = worker.submit(toy_policy(), [clip()])
    wait_until(lambda: worker.queued_jobs == 0)
    first = threading.Thread(target=worker.close)  # waits for the running job
    first.start()
    wait_until(lambda: worker.closed)
    second = threading.Thread(target=worker.close)
    second.start()
    second.join(timeout=0.3)
    assert second.is_alive()  # a second close(wait=True) waits too
    gate.set()
    first.join(timeout=5)
    second.join(timeout=5)
    assert not second.is_alive()
    job.result(timeout=5)


def test_a_thread_whose_result_is_out_takes_the_next_job_so_the_queue_is_not_full() -> None:
    # The event loop may answer a job (and its client send again) before the thread that
    # published the result runs again: that thread is idle, the queued job is its next,
    # and a request then is not refused for a full queue (#33: at c = places, clients
    # were refused in that instant and kept out for the refusal delay).
    gate, hold, published = threading.Event(), threading.Event(), threading.Event()
    worker, _ = make_worker(ToyFamily(gate=gate), threads=1, queue_depth=1, result_depth=4)

    def stall(_future: object) -> None:  # runs on the worker thread, the result out
        published.set()
        hold.wait(5)

    with worker:
        first = worker.submit(toy_policy(), [clip()])
        wait_until(lambda: worker.queued_jobs == 0)  # running, blocked on the gate
        first.future.add_done_callback(stall)
        queued = worker.submit(toy_policy(), [clip()])
        assert worker.waiting_jobs == 1
        assert worker.queue_full
        with pytest.raises(QueueFullError):
            worker.submit(toy_policy(), [clip()])
        gate.set()
        assert published.wait(5)
        assert worker.queued_jobs == 1  # the thread has not come back for it
        assert worker.waiting_jobs == 0
        assert not worker.queue_full
        extra = worker.submit(toy_policy(), [clip()])  # admitted
        assert worker.waiting_jobs == 1
        assert worker.queue_full
        with pytest.raises(QueueFullError):
            worker.submit(toy_policy(), [clip()])
        hold.set()
        for job in (first, queued, extra):
            job.result(timeout=5)
        wait_until(lambda: worker.waiting_jobs == 0 and not worker.queue_full)
        assert rejections(worker, "queue_full") == 2
        assert gauges_are_zero(worker)
