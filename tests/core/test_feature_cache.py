"""The feature cache: a hit skips decode, resample and features and returns the same
read-only arrays; admission still runs; the key follows every result-shaping policy field
and no limit; LRU under a byte budget; concurrent misses compute once; the bytes count in
a worker's host-bytes cap; the persistent tier round-trips and a corrupt blob is a miss."""

from __future__ import annotations

import random
import threading
from types import MappingProxyType, SimpleNamespace
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from toyfamily import TOY_POLICY, ToyFamily, toy_policy

from audiogate import create_host, hookimpl
from audiogate.api import AudioGate
from audiogate.cache import (
    LIMIT_FIELDS,
    RESULT_FIELDS,
    CachedClip,
    Claim,
    FeatureCache,
    FeatureKey,
    feature_key,
    from_blob,
    to_blob,
)
from audiogate.cache.entry import ENTRY_OVERHEAD_BYTES, MAGIC
from audiogate.cache.lookup import admit_hit
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import LimitError, PreprocessCancelled, SourceLostError
from audiogate.family import RegisteredFamily
from audiogate.metrics import AudioMetrics
from audiogate.pipeline import EncodedClip, PreparedClip, preflight, prepare_clips
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan, readonly
from audiogate.server.options import ServeOptions, add_serve_arguments, serve_options
from audiogate.testing.audio import noise, wav_bytes
from audiogate.worker import AudioWorker, WorkerLimits

MIB = 1 << 20
FAMILY = "toyfam"


@attrs.frozen(kw_only=True)
class ToyExtras(ClipFeatures):
    """A family's features with extras: the waveform it was computed from, and a tail."""

    waveform: npt.NDArray[np.float32] | None = None
    tail: npt.NDArray[np.float32] | None = None
    label: str = ""


class CountingToy(ToyFamily):
    """The toy family, counting its stage calls; ``extras`` returns :class:`ToyExtras`."""

    def __init__(self, *, extras: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.extras = extras
        self.resampled = 0

    @hookimpl
    def audiogate_resample(
        self,
        policy: AudioPolicy,
        plan: Any,
        samples: np.ndarray,
        clip_index: int,
        cancel: CancelToken,
    ) -> np.ndarray | None:
        if not self._mine(policy):
            return None
        self.resampled += 1
        return super().audiogate_resample(policy, plan, samples, clip_index, cancel)

    @hookimpl
    def audiogate_extract_features(
        self,
        policy: AudioPolicy,
        plan: FeaturePlan,
        waveform: np.ndarray,
        clip_index: int,
        cancel: CancelToken,
    ) -> ClipFeatures | None:
        plain = super().audiogate_extract_features(policy, plan, waveform, clip_index, cancel)
        if plain is None or not self.extras:
            return plain
        return ToyExtras(
            features=plain.features,
            mask=readonly(np.ones(plain.frames, dtype=np.bool_)),
            frames=plain.frames,
            tokens=plain.tokens,
            waveform=waveform,
            tail=readonly(np.arange(3, dtype=np.float32)),
            label="extras",
        )


def toy_host(toy: ToyFamily) -> Any:
    return create_host(load_entry_points=False, plugins=[toy])


def wav(samples: int = 3_200, *, seed: int = 0) -> bytes:
    return wav_bytes(noise(samples=samples, seed=seed), rate_hz=16_000)


def encoded(*datas: bytes) -> list[EncodedClip]:
    return [EncodedClip(data=data, ordinal=i + 1) for i, data in enumerate(datas)]


def key_of(name: str) -> FeatureKey:
    return FeatureKey(f"{name:0>64}", "f" * 64)


def entry(samples: int, *, seed: int = 0) -> CachedClip:
    waveform = readonly(np.full(samples, seed / 100, dtype=np.float32))
    frames = samples // 160
    features = readonly(waveform[: frames * 160].reshape(frames, 160).copy())
    return CachedClip(
        PreparedClip(
            index=0,
            ordinal=1,
            origin="bytes",
            sha256="0" * 64,
            encoded_bytes=samples * 2 + 44,
            source_rate_hz=16_000,
            channels=1,
            source_samples=samples,
            duration_us=samples * 1_000_000 // 16_000,
            normalized_samples=samples,
            effective_rate_hz=16_000,
            frames=frames,
            tokens=(frames + 1) // 2,
            received_duration_us=samples * 1_000_000 // 16_000,
            processed_duration_us=samples * 1_000_000 // 16_000,
            truncated=False,
            waveform=waveform,
            features=ClipFeatures(features=features, frames=frames, tokens=(frames + 1) // 2),
        )
    )


def with_features(cached: CachedClip, features: ClipFeatures) -> CachedClip:
    return attrs.evolve(cached, clip=attrs.evolve(cached.clip, features=features))


class DictStore:
    """The persistent tier's protocol, in memory (what a SourceStore provides)."""

    def __init__(self) -> None:
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.gets = 0

    def put_features(self, sha256: str, key: str, blob: bytes) -> None:
        self.blobs[sha256, key] = bytes(blob)

    def get_features(self, sha256: str, key: str) -> bytes | None:
        self.gets += 1
        return self.blobs.get((sha256, key))


# --- hits ------------------------------------------------------------------------------


def test_a_hit_skips_every_stage_and_returns_the_same_read_only_arrays(decodes) -> None:
    toy = CountingToy(extras=True)
    host = toy_host(toy)
    cache = FeatureCache(64 * MIB, metrics=AudioMetrics())
    data = [wav(3_200, seed=1), wav(4_800, seed=2)]
    first = prepare_clips(host, TOY_POLICY, encoded(*data), cache=cache)
    assert (len(decodes), toy.resampled, len(toy.extracted)) == (2, 2, 2)
    # New clip objects with the same bytes, in a new request: inline audio sent again.
    again = prepare_clips(host, TOY_POLICY, encoded(*data), cache=cache)
    assert (len(decodes), toy.resampled, len(toy.extracted)) == (2, 2, 2)
    assert (cache.hits, cache.misses) == (2, 2)
    for a, b in zip(first.clips, again.clips, strict=True):
        assert b.features is a.features
        assert b.waveform is a.waveform
        assert not b.waveform.flags.writeable
        assert not b.features.features.flags.writeable
        assert a.accounting() == b.accounting()
    for name, array in first.inputs.inputs.items():
        np.testing.assert_array_equal(again.inputs.inputs[name], array)
    assert again.totals == first.totals
    metrics = cache.metrics
    assert metrics is not None
    assert metrics.value("audiogate_feature_cache_hits_total", family=FAMILY, tier="memory") == 2
    assert metrics.value("audiogate_feature_cache_misses_total", family=FAMILY) == 2
    assert metrics.value("audiogate_feature_cache_bytes") == cache.resident_bytes > 0
    assert metrics.value("audiogate_feature_cache_entries") == 2


def test_a_hit_takes_its_place_in_the_new_request(decodes) -> None:
    host = toy_host(CountingToy())
    cache = FeatureCache(64 * MIB)
    a, b = wav(3_200, seed=1), wav(4_800, seed=2)
    prepare_clips(host, TOY_POLICY, encoded(a), cache=cache)
    batch = prepare_clips(host, TOY_POLICY, encoded(b, a), cache=cache)
    assert [c.ordinal for c in batch.clips] == [1, 2]
    assert [c.index for c in batch.clips] == [0, 1]
    assert batch.clips[1].normalized_samples == 3_200
    assert (cache.hits, cache.misses) == (1, 2)


def test_the_same_clip_twice_in_one_request_is_computed_once(decodes) -> None:
    # Its second lookup used to wait on the request's own claim, filled only after
    # collation: the request hung until cancelled.
    toy = CountingToy()
    host = toy_host(toy)
    cache = FeatureCache(64 * MIB)
    data = wav(3_200, seed=3)
    outcome: list[Any] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            prepare_clips(host, TOY_POLICY, encoded(data, data), cache=cache)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(10)
    assert outcome, "a request holding the same clip twice did not finish"
    (batch,) = outcome
    assert [c.ordinal for c in batch.clips] == [1, 2]
    assert batch.clips[1].features is batch.clips[0].features
    assert (len(decodes), len(toy.extracted)) == (1, 1)
    assert (cache.hits, cache.misses, len(cache)) == (0, 1, 1)


def test_a_gate_without_a_worker_caches_inline_bytes_sent_again(decodes) -> None:
    toy = CountingToy()
    gate = AudioGate(host=toy_host(toy), policy=TOY_POLICY, feature_cache_bytes=8 * MIB)
    data = wav(3_200)
    one = gate.prepare(clips=encoded(data))
    two = gate.prepare(clips=encoded(data))
    assert len(decodes) == 1
    assert len(toy.extracted) == 1
    assert two.features[0] is one.features[0]


def test_a_gate_with_a_worker_refuses_a_cache_of_its_own() -> None:
    host = toy_host(ToyFamily())
    with AudioWorker(host, feature_cache_bytes=MIB) as worker:
        gate = AudioGate(host=host, policy=TOY_POLICY, worker=worker)
        assert gate.feature_cache is worker.feature_cache
        with pytest.raises(TypeError, match="AudioWorker"):
            AudioGate(host=host, policy=TOY_POLICY, worker=worker, feature_cache_bytes=MIB)


def test_admission_still_runs_a_hit_is_refused_by_a_smaller_limit(decodes) -> None:
    host = toy_host(CountingToy())
    cache = FeatureCache(64 * MIB)
    data = wav(32_000)  # 2 s
    prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    strict = toy_policy(max_duration_seconds=1, max_samples_per_clip=16_000)
    with pytest.raises(LimitError):
        prepare_clips(host, strict, encoded(data), cache=cache)
    with pytest.raises(LimitError, match="frames"):
        prepare_clips(host, toy_policy(max_frames_per_request=10), encoded(data), cache=cache)
    assert cache.hits == 0  # refused before the lookup
    assert len(decodes) == 1


def test_a_hit_is_admitted_by_the_preflights_planning_of_its_exact_geometry() -> None:
    # A compressed clip's preflight sees an upper bound; its hit is held to the limits
    # decoding would have applied (which are not in the key), by the code that plans a
    # miss (no second copy of the checks).
    host = toy_host(CountingToy())
    (clip_plan,) = preflight(host, TOY_POLICY, encoded(wav(32_000))).clips
    cached = entry(32_000).clip
    assert admit_hit(host, TOY_POLICY, clip_plan, cached).normalized_samples == 32_000
    with pytest.raises(LimitError, match="source duration per clip"):
        admit_hit(host, toy_policy(max_duration_seconds=1), clip_plan, cached)
    with pytest.raises(LimitError, match="channels"):
        admit_hit(
            host,
            toy_policy(max_source_channels=1),
            clip_plan,
            attrs.evolve(cached, channels=2),
        )
    with pytest.raises(LimitError, match="frames per clip"):
        admit_hit(host, toy_policy(max_frames_per_clip=10), clip_plan, cached)


def test_a_truncating_policy_keys_on_its_cut() -> None:
    host = toy_host(CountingToy())
    cache = FeatureCache(64 * MIB)
    data = wav(48_000)  # 3 s
    cut = toy_policy(overflow="truncate", max_duration_seconds=1, max_samples_per_clip=16_000)
    short = prepare_clips(host, cut, encoded(data), cache=cache)
    whole = prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    assert short.clips[0].normalized_samples == 16_000
    assert short.clips[0].truncated
    assert whole.clips[0].normalized_samples == 48_000
    cut2 = toy_policy(overflow="truncate", max_duration_seconds=2, max_samples_per_clip=32_000)
    assert prepare_clips(host, cut2, encoded(data), cache=cache).clips[0].normalized_samples == (
        32_000
    )
    assert (cache.hits, cache.misses) == (0, 3)


# --- the key ---------------------------------------------------------------------------


def test_every_policy_field_is_either_result_or_limit() -> None:
    names = {field.name for field in attrs.fields(AudioPolicy)}
    assert set(RESULT_FIELDS) | LIMIT_FIELDS == names
    assert not set(RESULT_FIELDS) & LIMIT_FIELDS


def _changed(policy: AudioPolicy, name: str) -> Any:
    value = getattr(policy, name)
    special = {
        "feature_backend": "mlx",
        "overflow": "truncate",
        "placeholder": "numbered_per_clip",
        "allowed_source_rates_hz": (16_000,),
        "soft_tokens_per_clip": 7,
        "sources": {"target_rate_hz": ("checkpoint", "x.json", "/y")},
    }
    if name in special:
        return special[name]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, MappingProxyType):
        return {**value, "padding_side": "left"}
    raise AssertionError(f"no change known for {name}={value!r}")


def _fake_host(version: str = "0.0.1", dist_version: str | None = "1.0") -> Any:
    registered = SimpleNamespace(
        spec=SimpleNamespace(version=version),
        distribution="audiogate-toy",
        distribution_version=dist_version,
    )
    return SimpleNamespace(family=lambda name: registered)


def _key(policy: AudioPolicy, host: Any = None, **plan: int) -> FeatureKey:
    sizes = {"decode_frames": 16_000, "normalized_samples": 16_000, **plan}
    return feature_key(host or _fake_host(), policy, "a" * 64, **sizes)


@pytest.mark.parametrize("name", sorted(RESULT_FIELDS))
def test_changing_a_result_field_changes_the_key(name: str) -> None:
    changed = attrs.evolve(TOY_POLICY, **{name: _changed(TOY_POLICY, name)})
    assert _key(changed) != _key(TOY_POLICY)


@pytest.mark.parametrize("name", sorted(LIMIT_FIELDS - {"sources"}))
def test_changing_a_limit_keeps_the_key(name: str) -> None:
    changed = attrs.evolve(TOY_POLICY, **{name: _changed(TOY_POLICY, name)})
    assert _key(changed) == _key(TOY_POLICY)


def test_the_code_and_the_plan_are_in_the_key() -> None:
    base = _key(TOY_POLICY)
    assert _key(TOY_POLICY, _fake_host(version="0.0.2")) != base
    assert _key(TOY_POLICY, _fake_host(dist_version="1.1")) != base
    assert _key(TOY_POLICY, normalized_samples=15_999) != base
    assert _key(TOY_POLICY, decode_frames=15_999) != base
    assert feature_key(_fake_host(), TOY_POLICY, "b" * 64, decode_frames=1, normalized_samples=1)
    real = create_host(load_entry_points=False, plugins=[ToyFamily()])
    assert isinstance(real.family(FAMILY), RegisteredFamily)
    assert _key(TOY_POLICY, real) == _key(TOY_POLICY, real)


def test_the_key_is_the_hash_of_the_json_of_all_its_parts() -> None:
    # The policy's part is serialized once per policy; the text (and so the persisted
    # entries' names) is what one json.dumps of everything gives.
    import hashlib
    import json

    from audiogate._version import __version__
    from audiogate.cache.key import KEY_FORMAT, policy_result_fields

    parts = {
        "format": KEY_FORMAT,
        "core": __version__,
        "distribution": "audiogate-toy",
        "distribution_version": "1.0",
        "family_version": "0.0.1",
        "policy": policy_result_fields(TOY_POLICY),
        "decode_frames": 16_000,
        "normalized_samples": 16_000,
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    assert _key(TOY_POLICY).fingerprint == hashlib.sha256(text.encode()).hexdigest()
    assert _key(TOY_POLICY) == _key(TOY_POLICY)


def test_a_raw_declaration_is_in_the_key_and_a_container_s_is_not() -> None:
    from audiogate.decode.geometry import AUTO, WAV, SourceFormat

    def key(source_format: SourceFormat) -> FeatureKey:
        return feature_key(
            _fake_host(),
            TOY_POLICY,
            "a" * 64,
            decode_frames=3_200,
            normalized_samples=3_200,
            source_format=source_format,
        )

    assert key(WAV) == key(AUTO) == _key(TOY_POLICY, decode_frames=3_200, normalized_samples=3_200)
    raws = [
        SourceFormat.raw("f32", rate_hz=16_000, channels=1),
        SourceFormat.raw("pcm16", rate_hz=16_000, channels=2),
        SourceFormat.raw("f32", rate_hz=8_000, channels=1),
    ]
    assert len({key(f) for f in raws} | {key(WAV)}) == 4


def test_the_same_bytes_declared_as_other_raw_samples_are_not_a_hit(decodes) -> None:
    # 12,800 bytes are 3,200 frames both as f32 mono and as pcm16 stereo, at 16 kHz: the
    # same plan sizes, other samples. The second declaration used to get the first's
    # features.
    from audiogate.decode.geometry import SourceFormat

    host = toy_host(CountingToy())
    cache = FeatureCache(64 * MIB)
    data = (noise(samples=3_200, seed=5) * 0.5).astype("<f4").tobytes()
    mono = SourceFormat.raw("f32", rate_hz=16_000, channels=1)
    stereo = SourceFormat.raw("pcm16", rate_hz=16_000, channels=2)

    def clip(source_format: SourceFormat) -> list[EncodedClip]:
        return [EncodedClip(data=data, ordinal=1, source_format=source_format)]

    first = prepare_clips(host, TOY_POLICY, clip(mono), cache=cache)
    second = prepare_clips(host, TOY_POLICY, clip(stereo), cache=cache)
    assert (cache.hits, cache.misses) == (0, 2)
    uncached = prepare_clips(host, TOY_POLICY, clip(stereo))
    np.testing.assert_array_equal(
        second.clips[0].features.features, uncached.clips[0].features.features
    )
    assert not np.array_equal(first.clips[0].features.features, second.clips[0].features.features)
    again = prepare_clips(host, TOY_POLICY, clip(mono), cache=cache)
    assert again.clips[0].features is first.clips[0].features  # still a hit


# --- the LRU ---------------------------------------------------------------------------


def test_lru_evicts_the_least_recently_used_and_counts_it() -> None:
    size = entry(1_600).nbytes
    metrics = AudioMetrics()
    cache = FeatureCache(3 * size, metrics=metrics)
    for name in "abc":
        assert cache.put(key_of(name), entry(1_600))
    assert isinstance(cache.lookup(key_of("a"), family=FAMILY), CachedClip)  # a is recent
    cache.put(key_of("d"), entry(1_600))
    assert key_of("b") not in cache
    assert key_of("a") in cache
    assert cache.evictions == 1 == metrics.value("audiogate_feature_cache_evictions_total")
    assert cache.resident_bytes == 3 * size == metrics.value("audiogate_feature_cache_bytes")
    miss = cache.lookup(key_of("b"), family=FAMILY)
    assert isinstance(miss, Claim)
    miss.release()
    assert (cache.hits, cache.misses) == (1, 1)


def test_the_byte_budget_is_never_exceeded() -> None:
    rng = random.Random(7)
    budget = 200_000
    cache = FeatureCache(budget)
    for step in range(300):
        samples = rng.choice([160, 1_600, 8_000, 16_000, 60_000])
        kept = cache.put(key_of(str(rng.randrange(40))), entry(samples, seed=step % 50))
        assert cache.resident_bytes <= budget
        assert kept == (entry(samples).nbytes <= budget) or not kept
        assert cache.resident_bytes == sum(cache._sizes.values())
        assert (list(cache._sizes) and set(cache._sizes) == set(cache._entries)) or not cache
    assert not cache.put(key_of("huge"), entry(budget))  # larger than the whole budget
    assert key_of("huge") not in cache


def test_entry_bytes_count_a_shared_buffer_once() -> None:
    one = entry(16_000)
    clip = one.clip
    shared = with_features(
        one,
        ToyExtras(
            features=clip.features.features,
            frames=clip.frames,
            tokens=clip.tokens,
            waveform=clip.waveform,
        ),
    )
    assert shared.nbytes == one.nbytes
    assert one.nbytes == 16_000 * 4 + clip.frames * 160 * 4 + ENTRY_OVERHEAD_BYTES


def test_a_zero_budget_disables_the_cache(decodes) -> None:
    store = DictStore()
    metrics = AudioMetrics()
    cache = FeatureCache(0, store=store, metrics=metrics)
    assert not cache.enabled
    host = toy_host(CountingToy())
    data = wav()
    prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    assert len(decodes) == 2
    assert (len(cache), cache.hits, cache.misses, store.blobs, store.gets) == (0, 0, 0, {}, 0)
    assert metrics.value("audiogate_feature_cache_misses_total", family=FAMILY) == 0
    with pytest.raises(ValueError, match=">= 0"):
        FeatureCache(-1)


# --- threads ---------------------------------------------------------------------------


def test_concurrent_misses_of_one_key_compute_once() -> None:
    gate = threading.Event()
    toy = CountingToy(gate=gate)
    host = toy_host(toy)
    cache = FeatureCache(64 * MIB)
    data = wav(8_000)
    results: list[Any] = []

    def run() -> None:
        results.append(prepare_clips(host, TOY_POLICY, encoded(data), cache=cache))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    # One thread computes (held at the gate); the others wait for its claim.
    while not cache._claims:
        threading.Event().wait(0.005)
    gate.set()
    for thread in threads:
        thread.join(10)
    assert len(results) == 8
    assert toy.resampled == 1
    assert len(toy.extracted) == 1
    assert (cache.hits, cache.misses) == (7, 1)
    assert all(r.clips[0].features is results[0].clips[0].features for r in results)


def test_a_waiter_for_a_failed_claim_computes_itself_and_a_cancelled_one_stops() -> None:
    cache = FeatureCache(MIB)
    key = key_of("k")
    claim = cache.lookup(key, family=FAMILY)
    assert isinstance(claim, Claim)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(cache.lookup(key, family=FAMILY)))
    waiter.start()
    threading.Event().wait(0.05)
    claim.release()  # gave up without filling
    waiter.join(5)
    assert got == [None]  # compute without a claim: at most twice in all
    claim = cache.lookup(key, family=FAMILY)
    assert isinstance(claim, Claim)
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled) as caught:
        cache.lookup(key, family=FAMILY, cancel=token, clip_index=0)
    assert caught.value.checkpoint == Checkpoint.DECODE.value
    claim.fill(entry(1_600))
    claim.release()
    assert isinstance(cache.lookup(key, family=FAMILY), CachedClip)


def test_many_threads_on_many_keys_keep_the_lru_consistent() -> None:
    budget = 5 * entry(1_600).nbytes
    cache = FeatureCache(budget)
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(300):
                key = key_of(str(rng.randrange(12)))
                found = cache.lookup(key, family=FAMILY)
                if isinstance(found, Claim):
                    try:
                        found.fill(entry(rng.choice([160, 1_600])))
                    finally:
                        found.release()
                elif found is None:
                    cache.put(key, entry(160))
                if rng.random() < 0.05:
                    cache.reclaim(rng.randrange(budget))
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=churn, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert 0 <= cache.resident_bytes <= budget
    assert cache.resident_bytes == sum(cache._sizes.values())
    assert set(cache._sizes) == set(cache._entries)
    assert not cache._claims
    assert cache.hits + cache.misses == 8 * 300


# --- the worker ------------------------------------------------------------------------


def test_the_worker_charges_cache_bytes_to_its_host_cap(decodes) -> None:
    toy = CountingToy()
    host = toy_host(toy)
    metrics = AudioMetrics()
    with AudioWorker(
        host, limits=WorkerLimits(), metrics=metrics, feature_cache_bytes=16 * MIB
    ) as worker:
        data = wav(16_000)
        worker.prepare(TOY_POLICY, encoded(data))
        cache = worker.feature_cache
        assert len(cache) == 1
        assert worker._ledger.cache == cache.resident_bytes > 0
        # Reservations are back to 0; the cache's bytes are its own gauge.
        assert worker.inflight_host_bytes == 0
        assert metrics.value("audiogate_audio_preprocess_inflight_host_bytes") == 0
        assert metrics.value("audiogate_feature_cache_bytes") == cache.resident_bytes
        worker.prepare(TOY_POLICY, encoded(data))
        assert len(decodes) == 1
        assert metrics.value("audiogate_feature_cache_hits_total", family=FAMILY, tier="memory")


def test_a_reservation_evicts_cache_entries_instead_of_being_refused() -> None:
    host = toy_host(CountingToy())
    with AudioWorker(host, feature_cache_bytes=64 * MIB) as worker:
        ledger = worker._ledger
        cap = worker.limits.max_inflight_host_bytes
        for seed in range(3):
            worker.prepare(TOY_POLICY, encoded(wav(16_000, seed=seed)))
        held = worker.feature_cache.resident_bytes
        assert held > 0
        assert len(worker.feature_cache) == 3
        # A reservation that fits only without the cache evicts just enough of it.
        reservation = ledger.reserve(0, cap - held + 1)
        assert worker.feature_cache.evictions >= 1
        assert len(worker.feature_cache) < 3
        assert ledger.host + ledger.cache <= cap
        # A new entry makes room from the oldest; while reservations fill the whole cap
        # (which evicts everything), nothing is kept.
        assert worker.feature_cache.put(key_of("new"), entry(16_000))
        rest = ledger.reserve(0, cap - ledger.host)
        assert len(worker.feature_cache) == 0
        assert ledger.cache == 0
        assert not worker.feature_cache.put(key_of("newer"), entry(16_000))
        rest.release()
        reservation.release()
        worker.prepare(TOY_POLICY, encoded(wav(16_000, seed=9)))
        # One that would not fit even without the cache is refused, and evicts nothing.
        before = len(worker.feature_cache)
        with pytest.raises(Exception, match="in-flight host bytes"):
            ledger.reserve(0, cap + 1)
        assert len(worker.feature_cache) == before
        assert ledger.host == 0


# --- the persistent tier ---------------------------------------------------------------


def test_the_store_round_trips_and_a_restart_does_not_recompute(decodes) -> None:
    store = DictStore()
    toy = CountingToy(extras=True)
    host = toy_host(toy)
    first_cache = FeatureCache(64 * MIB, store=store)
    data = wav(8_000, seed=3)
    first = prepare_clips(host, TOY_POLICY, encoded(data), cache=first_cache)
    assert len(store.blobs) == 1
    # A new process: empty memory, the same store.
    metrics = AudioMetrics()
    second_cache = FeatureCache(64 * MIB, store=store, metrics=metrics)
    again = prepare_clips(host, TOY_POLICY, encoded(data), cache=second_cache)
    assert len(decodes) == 1
    assert len(toy.extracted) == 1
    assert metrics.value("audiogate_feature_cache_hits_total", family=FAMILY, tier="store") == 1
    a, b = first.clips[0], again.clips[0]
    assert a.accounting() == b.accounting()
    np.testing.assert_array_equal(b.waveform, a.waveform)
    assert type(b.features) is ToyExtras
    for field in ("features", "mask", "tail"):
        np.testing.assert_array_equal(getattr(b.features, field), getattr(a.features, field))
    assert b.features.label == "extras"
    # The waveform the extras share is one array after loading too.
    assert isinstance(b.features, ToyExtras)
    assert b.features.waveform is b.waveform
    assert not b.waveform.flags.writeable
    assert not b.features.features.flags.writeable
    np.testing.assert_array_equal(again.inputs.inputs["features"], first.inputs.inputs["features"])
    # Now in memory: the store is not asked again.
    gets = store.gets
    prepare_clips(host, TOY_POLICY, encoded(data), cache=second_cache)
    assert store.gets == gets


def _corruptions(blob: bytes) -> list[object]:
    head = len(MAGIC) + 4
    flipped = bytearray(blob)
    flipped[-5] ^= 0x40  # inside the last array's data: structurally valid
    return [
        b"",
        b"garbage",
        blob[: len(blob) // 2],
        blob + b"x",
        b"XXXXXXXX" + blob[len(MAGIC) :],
        blob[:head] + b"[" + blob[head + 1 :],
        blob[: len(MAGIC)] + (1 << 30).to_bytes(4, "little") + blob[head:],
        bytes(flipped),
        "not bytes",
        None,
    ]


def test_a_corrupt_blob_is_a_miss_never_an_error(decodes) -> None:
    store = DictStore()
    host = toy_host(CountingToy())
    data = wav(8_000, seed=4)
    prepare_clips(host, TOY_POLICY, encoded(data), cache=FeatureCache(MIB, store=store))
    ((where, blob),) = store.blobs.items()
    for bad in _corruptions(blob):
        store.blobs[where] = bad  # type: ignore[assignment]
        cache = FeatureCache(MIB, store=store)
        batch = prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
        assert batch.clips[0].normalized_samples == 8_000
        assert (cache.hits, cache.misses) == (0, 1), bad
    assert len(decodes) == 1 + len(_corruptions(blob))


def test_a_blob_of_another_key_or_an_unknown_class_is_a_miss() -> None:
    clip = entry(1_600)
    key = key_of("a")
    blob = to_blob(key, clip)
    assert blob is not None
    assert from_blob(key, blob) is not None
    assert from_blob(FeatureKey(key.sha256, "e" * 64), blob) is None
    assert from_blob(key_of("b"), blob) is None
    foreign = blob.replace(b'"audiogate.records"', b'"os.path"')
    assert from_blob(key, foreign) is None


def test_a_failing_store_never_fails_a_request(decodes) -> None:
    class Broken:
        def put_features(self, sha256: str, key: str, blob: bytes) -> None:
            raise OSError("disk full")

        def get_features(self, sha256: str, key: str) -> bytes | None:
            raise OSError("gone")

    host = toy_host(CountingToy())
    cache = FeatureCache(MIB, store=Broken())
    data = wav()
    prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    assert len(decodes) == 1
    assert cache.hits == 1


def test_arrays_that_are_not_numpy_are_neither_kept_nor_persisted() -> None:
    store = DictStore()
    cache = FeatureCache(MIB, store=store)

    class Foreign:
        nbytes = 8
        shape = (2,)

    cached = entry(1_600)
    clip = cached.clip
    odd = with_features(
        cached,
        ToyExtras(
            features=clip.features.features,
            frames=clip.frames,
            tokens=clip.tokens,
            tail=Foreign(),  # type: ignore[arg-type]
        ),
    )
    assert not cache.put(key_of("x"), odd)
    assert not store.blobs


# --- serve -----------------------------------------------------------------------------


def test_serve_takes_feature_cache_bytes() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    default = serve_options(parser.parse_args(["--model", "m"]))
    assert (
        default.feature_cache_bytes == 256 * MIB == ServeOptions(model_dir="m").feature_cache_bytes
    )
    off = serve_options(parser.parse_args(["--model", "m", "--feature-cache-bytes", "0"]))
    assert off.feature_cache_bytes == 0
    small = serve_options(parser.parse_args(["--model", "m", "--feature-cache-bytes", "8MiB"]))
    assert small.feature_cache_bytes == 8 * MIB


def test_the_source_store_is_a_persistent_tier_across_a_restart(tmp_path, decodes) -> None:
    from audiogate.store import SourceStore

    toy = CountingToy(extras=True)
    host = toy_host(toy)
    data, loose = wav(8_000, seed=5), wav(8_000, seed=6)
    store = SourceStore.open(tmp_path / "store")
    store.add(data, owner="alice", duration_us=500_000)
    first = prepare_clips(
        host, TOY_POLICY, encoded(data, loose), cache=FeatureCache(MIB, store=store)
    )
    store.close()
    # A restart: a new store object on the same directory, an empty memory tier.
    store = SourceStore.open(tmp_path / "store")
    try:
        cache = FeatureCache(MIB, store=store, metrics=AudioMetrics())
        again = prepare_clips(host, TOY_POLICY, encoded(data, loose), cache=cache)
    finally:
        store.close()
    # The stored source's features came from disk; the clip the store does not hold was
    # not persisted (the store keeps features of its live sources only) and is computed.
    assert (cache.hits, cache.misses) == (1, 1)
    assert len(decodes) == 3
    assert cache.metrics is not None
    assert cache.metrics.value("audiogate_feature_cache_hits_total", family=FAMILY, tier="store")
    a, b = first.clips[0], again.clips[0]
    assert a.accounting() == b.accounting()
    np.testing.assert_array_equal(b.features.features, a.features.features)
    np.testing.assert_array_equal(b.waveform, a.waveform)
    np.testing.assert_array_equal(again.inputs.inputs["features"], first.inputs.inputs["features"])


# --- later turns: one hash, no second collation (#23) ----------------------------------


def _counting_collate(host: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = host.collate_features

    def counting(policy: AudioPolicy, clips: Any) -> Any:
        calls.append(len(clips))
        return real(policy, clips)

    monkeypatch.setattr(host, "collate_features", counting)
    return calls


def test_a_single_clip_hit_reuses_its_collated_inputs(decodes, monkeypatch) -> None:
    host = toy_host(CountingToy())
    collations = _counting_collate(host, monkeypatch)
    cache = FeatureCache(64 * MIB)
    data, other = wav(3_200, seed=1), wav(4_800, seed=2)
    first = prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    again = prepare_clips(host, TOY_POLICY, encoded(data), cache=cache)
    assert collations == [1]
    assert again.inputs is first.inputs
    assert again.inputs.tokens == first.inputs.tokens
    for array in again.inputs.inputs.values():
        assert not array.flags.writeable
    # The collated arrays are charged with the entry.
    (held,) = cache._entries.values()
    assert held.collated is first.inputs
    assert held.nbytes > attrs.evolve(held, collated=None).nbytes
    # In a request of several clips, a hit is collated with the others, as before.
    both = prepare_clips(host, TOY_POLICY, encoded(data, other), cache=cache)
    assert collations == [1, 2]
    fresh = prepare_clips(host, TOY_POLICY, encoded(data, other))
    for name, array in fresh.inputs.inputs.items():
        np.testing.assert_array_equal(both.inputs.inputs[name], array)


def test_a_clip_is_hashed_once_and_a_stored_digest_not_at_all(monkeypatch) -> None:
    import hashlib

    from audiogate.acquire import clip as clip_module

    hashed: list[int] = []

    def counting(data: bytes) -> Any:
        hashed.append(len(data))
        return hashlib.sha256(data)

    monkeypatch.setattr(clip_module, "hashlib", SimpleNamespace(sha256=counting))
    data = wav(3_200)
    clip = EncodedClip(data=data, ordinal=1)
    assert clip.sha256 == clip.sha256 == hashlib.sha256(data).hexdigest()
    assert len(hashed) == 1
    stored = EncodedClip(data=data, ordinal=1, stored_sha256=clip.sha256)
    assert stored.sha256 == clip.sha256
    assert len(hashed) == 1
    stored.check_digest()  # proving it is the one hash
    assert len(hashed) == 2
    assert stored == clip  # the digest is not part of the value


def test_a_stored_digest_is_proven_before_decoding_and_a_hit_serves_what_it_named(
    decodes,
) -> None:
    host = toy_host(CountingToy())
    cache = FeatureCache(64 * MIB)
    good = wav(3_200, seed=1)
    digest = EncodedClip(data=good, ordinal=1).sha256
    damaged = good[:-100] + bytes(100)  # same size and header, other samples
    first = prepare_clips(host, TOY_POLICY, encoded(good), cache=cache)
    clip = EncodedClip(data=damaged, ordinal=1, stored_sha256=digest)
    # A hit serves the features of the bytes the digest names, computed from them.
    hit = prepare_clips(host, TOY_POLICY, [clip], cache=cache)
    assert hit.clips[0].features is first.clips[0].features
    assert len(decodes) == 1
    # A miss proves the digest before any sample is decoded: nothing of it is computed.
    with pytest.raises(SourceLostError, match=digest):
        prepare_clips(host, TOY_POLICY, [clip], cache=FeatureCache(64 * MIB))
    with pytest.raises(SourceLostError):
        prepare_clips(host, TOY_POLICY, [clip])
    assert len(decodes) == 1
