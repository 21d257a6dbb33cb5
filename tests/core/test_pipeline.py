"""The request pipeline: preflight order and budgets, the batch, cancellation, truncation."""

from __future__ import annotations

import tracemalloc

import attrs
import numpy as np
import pytest
from toyfamily import HOP, ToyFamily, toy_policy, toy_tokens

from audiogate import create_host, hookimpl
from audiogate.api import AudioGate
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.decode import WAV, SourceFormat
from audiogate.errors import (
    DecodeError,
    EmptyAudioError,
    FeatureError,
    LimitError,
    MemoryLimitError,
    PlaceholderError,
    PreprocessCancelled,
)
from audiogate.metrics import AudioMetrics
from audiogate.pipeline import EncodedClip, preflight, prepare_clips
from audiogate.records import FeatureBatch, readonly
from audiogate.testing.audio import noise, tone, wav_bytes
from audiogate.worker import AudioWorker


@pytest.fixture
def toy() -> ToyFamily:
    return ToyFamily()


@pytest.fixture
def toy_host(toy: ToyFamily):
    return create_host(load_entry_points=False, plugins=[toy])


def clip(
    samples, *, rate_hz: int = 16_000, ordinal: int = 1, encoding: str = "pcm16"
) -> EncodedClip:
    return EncodedClip(data=wav_bytes(samples, rate_hz=rate_hz, encoding=encoding), ordinal=ordinal)


def clips(*lengths: int, rate_hz: int = 16_000) -> list[EncodedClip]:
    return [
        clip(tone(samples=n, rate_hz=rate_hz), rate_hz=rate_hz, ordinal=i + 1)
        for i, n in enumerate(lengths)
    ]


class CancelAt(CancelToken):
    """A token that cancels itself on the ``nth`` poll of ``checkpoint``."""

    def __init__(self, checkpoint: Checkpoint, nth: int = 1) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.remaining = nth
        self.polls: list[tuple[Checkpoint, int | None]] = []

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        self.polls.append((checkpoint, clip_index))
        if checkpoint == self.checkpoint:
            self.remaining -= 1
            if self.remaining <= 0:
                self.cancel()
        super().check(checkpoint, clip_index)


# --- the batch -------------------------------------------------------------------------


def test_batch_preserves_clip_order_ordinals_accounting_and_boundaries(toy_host) -> None:
    request = [
        clip(tone(samples=3_200), rate_hz=16_000, ordinal=1),
        clip(
            tone(samples=800, channels=2, rate_hz=8_000), rate_hz=8_000, ordinal=2, encoding="f32"
        ),
        clip(tone(samples=4_800, rate_hz=48_000), rate_hz=48_000, ordinal=3),
    ]
    batch = prepare_clips(toy_host, toy_policy(), request)
    assert [c.ordinal for c in batch.clips] == [1, 2, 3]
    first, second, third = batch.clips
    assert (first.source_rate_hz, first.channels, first.source_samples) == (16_000, 1, 3_200)
    assert (second.source_rate_hz, second.channels, second.source_samples) == (8_000, 2, 800)
    assert (third.source_rate_hz, third.source_samples, third.normalized_samples) == (
        48_000,
        4_800,
        1_600,
    )
    assert second.normalized_samples == 1_600
    assert second.effective_rate_hz == 16_000
    assert first.duration_us == 200_000
    assert second.duration_us == 100_000
    assert [c.frames for c in batch.clips] == [20, 10, 10]
    assert [c.tokens for c in batch.clips] == [toy_tokens(20), toy_tokens(10), toy_tokens(10)]
    assert first.encoded_bytes == len(request[0].data)
    assert batch.totals.normalized_samples == 3_200 + 1_600 + 1_600
    assert batch.totals.tokens == sum(c.tokens for c in batch.clips)
    assert batch.totals.encoded_bytes == sum(len(c.data) for c in request)
    assert batch.boundaries == ((1, 0, 3_200), (2, 3_200, 4_800), (3, 4_800, 6_400))
    assert batch.inputs.tokens == tuple(c.tokens for c in batch.clips)
    for prepared in batch.clips:
        assert not prepared.waveform.flags.writeable
        assert prepared.waveform.dtype == np.float32
        assert not prepared.features.features.flags.writeable
        assert prepared.sha256 == request[prepared.index].sha256
        assert not prepared.truncated


def test_same_bytes_give_identical_batches_whatever_their_origin(toy_host, tmp_path) -> None:
    data = wav_bytes(noise(samples=5_000, channels=2), rate_hz=16_000)
    path = tmp_path / "clip.wav"
    path.write_bytes(data)
    from_file = EncodedClip(data=path.read_bytes(), ordinal=1, origin="file")
    from_server = EncodedClip(data=bytearray(data), ordinal=1, origin="inline base64")
    a = prepare_clips(toy_host, toy_policy(), [from_file])
    b = prepare_clips(toy_host, toy_policy(), [from_server])
    assert a.clips[0].waveform.tobytes() == b.clips[0].waveform.tobytes()
    assert a.clips[0].features.features.tobytes() == b.clips[0].features.features.tobytes()
    assert a.totals == b.totals
    assert a.clips[0].accounting() == b.clips[0].accounting()


def test_raw_pcm_and_wav_of_the_same_samples_are_bit_identical(toy_host) -> None:
    samples = noise(samples=3_000, channels=2)
    wav = EncodedClip(data=wav_bytes(samples, rate_hz=16_000), ordinal=1)
    pcm = np.clip(np.round(samples * 32768), -32768, 32767).astype("<i2").tobytes()
    raw = EncodedClip(
        data=pcm, ordinal=1, source_format=SourceFormat.raw("pcm16", rate_hz=16_000, channels=2)
    )
    a = prepare_clips(toy_host, toy_policy(), [wav])
    b = prepare_clips(toy_host, toy_policy(), [raw])
    assert a.clips[0].waveform.tobytes() == b.clips[0].waveform.tobytes()


# --- preflight: every limit, before anything large is allocated --------------------------


def _refuse_without_allocating(
    toy_host, policy, request, error: type[Exception], match: str, cancel: CancelToken | None = None
) -> Exception:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(error, match=match) as info:
            preflight(toy_host, policy, request, cancel=cancel or CancelToken())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Headers only: far below any clip's decoded size (each test clip decodes to >= 64 KiB).
    assert peak < 48 * 1024, f"preflight allocated {peak} bytes before refusing"
    return info.value


BIG = 32_000  # samples: 125 KiB of float32 per clip when decoded


@pytest.mark.parametrize(
    ("name", "policy_changes", "lengths", "error", "match"),
    [
        ("clip count", {"max_clips": 2}, (BIG, BIG, BIG), LimitError, "clip count"),
        (
            "encoded per clip",
            {"max_encoded_bytes_per_clip": 60_000},
            (BIG,),
            LimitError,
            "encoded bytes per clip",
        ),
        (
            "encoded per request",
            {"max_encoded_bytes_per_request": 100_000},
            (BIG, BIG),
            MemoryLimitError,
            "encoded bytes per request",
        ),
        (
            "source samples per request",
            {"max_source_samples_per_request": 50_000},
            (BIG, BIG),
            LimitError,
            "source samples per request",
        ),
        (
            "source duration per request",
            {"max_source_duration_us_per_request": 3_000_000},
            (BIG, BIG),
            LimitError,
            "source duration per request",
        ),
        (
            "duration samples",
            {"max_samples_per_clip": 20_000},
            (BIG,),
            LimitError,
            "duration samples",
        ),
        (
            "normalized per request",
            {"max_normalized_samples_per_request": 50_000},
            (BIG, BIG),
            LimitError,
            "normalized samples per request",
        ),
        (
            "frames per clip",
            {"max_frames_per_clip": 100},
            (BIG,),
            LimitError,
            "feature frames per clip",
        ),
        (
            "frames per request",
            {"max_frames_per_request": 300},
            (BIG, BIG),
            LimitError,
            "feature frames per request",
        ),
        (
            "waveform result bytes",
            {"max_waveform_result_bytes_per_request": 200_000},
            (BIG, BIG),
            MemoryLimitError,
            "waveform result bytes",
        ),
        (
            "waveform working bytes",
            {"max_waveform_working_bytes_per_request": 300_000},
            (BIG, BIG),
            MemoryLimitError,
            "waveform working bytes",
        ),
        (
            "prepared result bytes",
            {"max_prepared_result_bytes_per_request": 300_000},
            (BIG, BIG),
            MemoryLimitError,
            "prepared result bytes",
        ),
    ],
)
def test_each_limit_is_refused_in_preflight_without_allocation(
    toy_host, name, policy_changes, lengths, error, match
) -> None:
    request = clips(*lengths)
    policy = toy_policy(**policy_changes)
    refused = _refuse_without_allocating(toy_host, policy, request, error, match)
    assert isinstance(refused, LimitError)
    assert refused.actual > refused.maximum
    # The same request passes when the limit is lifted back to the default.
    preflight(toy_host, toy_policy(), request)


class OversizedCollate(ToyFamily):
    """Collates an input its plan does not count, of ``extra_bytes`` bytes."""

    extra_bytes = 0

    @hookimpl
    def audiogate_collate_features(self, policy, clips):
        batch = super().audiogate_collate_features(policy, clips)
        if batch is None:
            return None
        extra = readonly(np.zeros(self.extra_bytes, dtype=np.uint8))
        return FeatureBatch(inputs={**batch.inputs, "extra": extra}, tokens=batch.tokens)


def test_collated_bytes_over_the_policy_are_refused_with_or_without_a_worker() -> None:
    # The preflight checks the planned result bytes; what a family actually collates is
    # checked after collation, on every path (it once was on the worker's alone).
    family = OversizedCollate()
    host = create_host(load_entry_points=False, plugins=[family])
    request = clips(BIG)
    planned = preflight(host, toy_policy(), request).prepared_result_bytes
    family.extra_bytes = planned + 1
    policy = toy_policy(max_prepared_result_bytes_per_request=planned)
    preflight(host, policy, request)  # the plan fits
    refused = []
    with pytest.raises(MemoryLimitError, match="prepared result bytes per request") as caught:
        prepare_clips(host, policy, request)
    refused.append(caught.value)
    with pytest.raises(MemoryLimitError, match="prepared result bytes per request") as caught:
        AudioGate(host=host, policy=policy).prepare(clips=request)
    refused.append(caught.value)
    with AudioWorker(host, metrics=AudioMetrics()) as worker:
        with pytest.raises(MemoryLimitError, match="prepared result bytes per request") as caught:
            worker.prepare(policy, request, timeout=5)
        refused.append(caught.value)
        rejected = worker.metrics.value(
            "audiogate_audio_preprocess_rejections_total", family="toyfam", reason="memory_limit"
        )
        assert rejected == 1
    assert {(e.limit, e.actual, e.maximum) for e in refused} == {
        ("prepared result bytes per request", refused[0].actual, planned)
    }
    assert refused[0].actual > planned


def test_aggregates_are_request_totals_not_per_clip_multiples(toy_host) -> None:
    # Each clip is within every per-clip limit; only their sum exceeds the request cap.
    policy = toy_policy(max_normalized_samples_per_request=50_000, max_samples_per_clip=32_000)
    preflight(toy_host, policy, clips(BIG))
    with pytest.raises(LimitError, match="normalized samples per request") as info:
        preflight(toy_host, policy, clips(BIG, BIG))
    assert (info.value.actual, info.value.maximum) == (64_000, 50_000)


def test_the_first_failing_check_in_mlxcels_order_is_reported(toy_host) -> None:
    # Clip 0 breaks "duration samples" (checked after the request encoded bytes); clip 1
    # would break the encoded-bytes cap, but clip 0 is refused first.
    policy = toy_policy(max_samples_per_clip=10_000, max_encoded_bytes_per_request=70_000)
    with pytest.raises(LimitError, match="duration samples") as info:
        preflight(toy_host, policy, clips(BIG, BIG))
    assert info.value.clip_index == 0


def test_request_source_totals_come_before_the_plan_and_the_per_clip_cap(toy_host) -> None:
    # Clip 1 breaks the request's source duration and the per-clip normalized cap; then,
    # as a 12 kHz clip, the toy's resample plan too. mlxcel's preprocess_wav_refs checks
    # the source duration first, then the plan, then the per-clip cap.
    policy = toy_policy(max_source_duration_us_per_request=1_400_000, max_samples_per_clip=12_000)
    request = [clip(tone(samples=8_000), ordinal=1), clip(tone(samples=16_000), ordinal=2)]
    with pytest.raises(LimitError, match="source duration per request") as info:
        preflight(toy_host, policy, request)
    assert (info.value.clip_index, info.value.actual) == (1, 1_500_000)
    request[1] = clip(tone(samples=12_000, rate_hz=12_000), rate_hz=12_000, ordinal=2)
    with pytest.raises(LimitError, match="source duration per request"):
        preflight(toy_host, toy_policy(max_source_duration_us_per_request=1_400_000), request)
    with pytest.raises(FeatureError, match="cannot resample 12000"):
        preflight(toy_host, toy_policy(), request)


def test_ordinals_must_be_one_based_and_contiguous(toy_host) -> None:
    request = [clip(tone(samples=1_600), ordinal=2)]
    _refuse_without_allocating(toy_host, toy_policy(), request, PlaceholderError, "expected 1")


def test_no_clips_and_empty_clip_are_refused(toy_host) -> None:
    with pytest.raises(EmptyAudioError):
        preflight(toy_host, toy_policy(), [])
    with pytest.raises(EmptyAudioError, match="clip 1"):
        preflight(toy_host, toy_policy(), [EncodedClip(data=b"", ordinal=1)])


def test_header_policy_checks_happen_in_preflight(toy_host) -> None:
    request = clips(BIG, rate_hz=16_000)
    with pytest.raises(LimitError, match="source sample rate"):
        preflight(toy_host, toy_policy(max_source_rate_hz=8_000, min_source_rate_hz=8_000), request)
    with pytest.raises(DecodeError, match="not an audio format audiogate decodes"):
        preflight(toy_host, toy_policy(), [EncodedClip(data=b"not a wav at all", ordinal=1)])
    with pytest.raises(DecodeError, match="corrupt"):
        preflight(
            toy_host,
            toy_policy(),
            [EncodedClip(data=b"not a wav at all", ordinal=1, source_format=WAV)],
        )


def test_too_short_for_a_frame_is_a_feature_error(toy_host) -> None:
    with pytest.raises(FeatureError, match="shorter than one"):
        preflight(toy_host, toy_policy(), clips(100))
    with pytest.raises(FeatureError, match="at least 500"):
        preflight(toy_host, toy_policy(min_samples_per_clip=500), clips(400))


def test_plan_host_bytes_cover_what_processing_allocates(toy_host) -> None:
    request = clips(BIG, 48_000)
    plan = preflight(toy_host, toy_policy(), request)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        batch = prepare_clips(toy_host, toy_policy(), request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= plan.host_bytes, (peak, plan.host_bytes)
    assert batch.totals.normalized_samples * 4 == plan.waveform_result_bytes


# --- truncate mode ---------------------------------------------------------------------


def test_reject_mode_refuses_over_long_audio(toy_host) -> None:
    with pytest.raises(LimitError, match="duration"):
        preflight(
            toy_host, toy_policy(max_duration_seconds=1, max_samples_per_clip=16_000), clips(20_000)
        )


@pytest.mark.parametrize("rate_hz", [16_000, 8_000])
def test_truncate_mode_cuts_at_the_limit_and_reports_both_durations(toy_host, rate_hz: int) -> None:
    policy = toy_policy(max_duration_seconds=1, max_samples_per_clip=16_000, overflow="truncate")
    samples = noise(samples=int(rate_hz * 1.5))
    request = [clip(samples, rate_hz=rate_hz)]
    batch = prepare_clips(toy_host, policy, request)
    (prepared,) = batch.clips
    assert prepared.truncated
    assert prepared.normalized_samples == 16_000
    assert prepared.processed_duration_us == 1_000_000
    assert prepared.received_duration_us == 1_500_000
    assert prepared.frames == 16_000 // HOP
    full = prepare_clips(toy_host, toy_policy(), request)
    assert prepared.waveform.tobytes() == full.clips[0].waveform[:16_000].tobytes()


@pytest.mark.parametrize("rate_hz", [16_000, 8_000])
def test_a_truncated_clip_charges_the_request_only_for_what_is_kept(toy_host, rate_hz) -> None:
    # The request caps equal the per-clip limit: the cut clip fits them exactly, though
    # its resampler reads a source frame past the cut and it was received 1.5x longer.
    policy = toy_policy(
        max_duration_seconds=1,
        max_samples_per_clip=16_000,
        overflow="truncate",
        max_source_duration_us_per_request=1_000_000,
        max_source_samples_per_request=rate_hz,
    )
    request = [clip(noise(samples=int(rate_hz * 1.5)), rate_hz=rate_hz)]
    (prepared,) = prepare_clips(toy_host, policy, request).clips
    assert prepared.truncated
    assert prepared.normalized_samples == 16_000
    tighter = attrs.evolve(policy, max_source_duration_us_per_request=999_999)
    with pytest.raises(LimitError, match="source duration per request") as info:
        preflight(toy_host, tighter, request)
    assert info.value.actual == 1_000_000


# --- cancellation ----------------------------------------------------------------------


def test_a_cancelled_token_stops_at_acquisition(toy_host) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled, match="Acquisition"):
        prepare_clips(toy_host, toy_policy(), clips(1_600), cancel=token)


@pytest.mark.parametrize(
    ("checkpoint", "nth"),
    [(Checkpoint.DECODE, 3), (Checkpoint.RESAMPLE, 3), (Checkpoint.FEATURE, 5)],
)
def test_cancellation_is_noticed_inside_each_stage_loop(toy_host, checkpoint, nth) -> None:
    # 200k samples: several decode blocks, many resample blocks and feature blocks.
    token = CancelAt(checkpoint, nth)
    with pytest.raises(PreprocessCancelled) as info:
        prepare_clips(toy_host, toy_policy(), clips(200_000), cancel=token)
    assert info.value.checkpoint == checkpoint.value
    assert info.value.clip_index == 0
    # The stage polled more than once before stopping: it was inside its loop.
    assert sum(1 for cp, _ in token.polls if cp == checkpoint) == nth


def test_cancellation_names_the_clip() -> None:
    token = CancelToken()

    def cancel_when_second_clip_starts(index: int) -> None:
        if index == 1:
            token.cancel()

    host = create_host(
        load_entry_points=False, plugins=[ToyFamily(on_extract=cancel_when_second_clip_starts)]
    )
    with pytest.raises(PreprocessCancelled) as info:
        prepare_clips(host, toy_policy(), clips(1_600, 1_600), cancel=token)
    assert (info.value.checkpoint, info.value.clip_index) == ("Feature", 1)


def test_progress_callback_sees_every_stage(toy_host) -> None:
    stages: list[tuple[str, int, int]] = []
    prepare_clips(toy_host, toy_policy(), clips(1_600, 3_200), progress=lambda *a: stages.append(a))
    assert stages[0] == ("decode", 0, 2)
    assert ("features", 1, 2) in stages
    assert stages[-1] == ("done", 2, 2)
