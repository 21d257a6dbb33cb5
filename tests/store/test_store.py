"""The source store: records, ownership, lifecycle, leases, quotas and recovery."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from storekit import source

from audiogate.cancel import CancelToken
from audiogate.errors import (
    PreprocessCancelled,
    SourceBusyError,
    SourceLostError,
    SourceNotFoundError,
    SourceQuotaError,
    SourceRetiredError,
)
from audiogate.store import SourceStore, StoreQuotas


def _add(store: SourceStore, data: bytes, owner: str = "alice", **kw):
    return store.add(data, owner=owner, duration_us=1_000_000, **kw)


def test_a_source_is_named_by_its_digest_and_read_back_identically(store) -> None:
    data = source(seed=1)
    added = _add(store, data)
    assert added.created
    assert added.record.sha256 == hashlib.sha256(data).hexdigest()
    assert added.record.status == "ready"
    assert added.record.scope == "private"
    assert added.record.nbytes == len(data)
    assert store.read(added.record.sha256, owner="alice") == data
    assert store.get(added.record.sha256, owner="alice") == added.record
    assert [r.sha256 for r in store.list("alice")] == [added.record.sha256]


def test_the_same_owner_uploading_the_same_bytes_gets_the_existing_record(store, backing) -> None:
    data = source(seed=2)
    first = _add(store, data)
    again = _add(store, data, scope="shared")
    assert not again.created
    assert again.record == first.record
    assert len(backing.blobs()) == 1
    other = _add(store, data, owner="bob")  # another owner: its own record, the same blob
    assert other.created
    assert other.record.owner == "bob"
    assert len(backing.blobs()) == 1


def test_another_owners_private_source_is_refused_exactly_like_a_missing_one(
    store, tmp_path
) -> None:
    data = source(seed=3)
    sha = _add(store, data).record.sha256
    with pytest.raises(SourceNotFoundError) as theirs:
        store.lease(sha, owner="mallory", clip_index=0)
    empty = SourceStore.open(tmp_path / "empty")
    with pytest.raises(SourceNotFoundError) as missing:
        empty.lease(sha, owner="mallory", clip_index=0)
    assert type(theirs.value) is type(missing.value)
    assert theirs.value.code == missing.value.code == "source_not_found"
    assert str(theirs.value) == str(missing.value)
    for call in (store.get, empty.get):
        with pytest.raises(SourceNotFoundError) as seen:
            call(sha, owner="mallory")
        assert str(seen.value) == str(SourceNotFoundError(sha))
    with pytest.raises(SourceNotFoundError) as retire:
        store.retire(sha, owner="mallory")
    assert str(retire.value) == str(SourceNotFoundError(sha))
    assert store.get(sha, owner="alice").status == "ready"  # untouched
    empty.close()


def test_a_shared_source_can_be_referenced_by_anyone_and_retired_by_its_owner_only(store) -> None:
    sha = _add(store, source(seed=4), scope="shared").record.sha256
    lease = store.lease(sha, owner="bob")
    assert lease.record.owner == "alice"
    lease.release()
    with pytest.raises(SourceNotFoundError):
        store.retire(sha, owner="bob")
    assert store.retire(sha, owner="alice").status == "retired"
    with pytest.raises(SourceRetiredError):
        store.lease(sha, owner="bob")


def test_a_processing_source_makes_a_reference_wait_until_ready(store) -> None:
    sha = _add(store, source(seed=5), status="processing").record.sha256
    timer = threading.Timer(0.2, lambda: store.mark_ready(sha, owner="alice"))
    start = time.monotonic()
    timer.start()
    lease = store.lease(sha, owner="alice", wait_s=10.0)
    assert time.monotonic() - start >= 0.15
    assert lease.record.status == "ready"
    lease.release()


def test_the_wait_for_a_processing_source_is_bounded_and_cancellable(store) -> None:
    sha = _add(store, source(seed=6), status="processing").record.sha256
    with pytest.raises(SourceBusyError) as busy:
        store.lease(sha, owner="alice", wait_s=0.1, clip_index=1)
    assert busy.value.code == "source_processing"
    assert busy.value.clip_index == 1
    token = CancelToken()
    threading.Timer(0.1, token.cancel).start()
    with pytest.raises(PreprocessCancelled):
        store.lease(sha, owner="alice", wait_s=30.0, cancel=token)


def test_retiring_a_leased_source_completes_when_the_lease_is_released(store, backing) -> None:
    data = source(seed=7)
    sha = _add(store, data).record.sha256
    lease = store.lease(sha, owner="alice")
    done: list[object] = []
    retiring = threading.Thread(target=lambda: done.append(store.retire(sha, owner="alice")))
    retiring.start()
    time.sleep(0.2)
    assert not done  # still held
    with pytest.raises(SourceRetiredError):  # new references: refused at once
        store.lease(sha, owner="alice")
    assert store.get(sha, owner="alice").status == "retired"
    assert lease.data == data  # the holder still reads its bytes
    lease.release()
    retiring.join(5)
    assert done
    assert done[0].status == "retired"
    assert backing.blobs() == []
    history = store.list("alice", include_retired=True)
    assert [(r.sha256, r.status) for r in history] == [(sha, "retired")]
    assert store.list("alice") == []


def test_a_bounded_retirement_of_a_held_source_is_refused_and_changes_nothing(store) -> None:
    sha = _add(store, source(seed=8)).record.sha256
    lease = store.lease(sha, owner="alice")
    with pytest.raises(SourceBusyError):
        store.retire(sha, owner="alice", timeout_s=0.1)
    lease.release()
    assert store.get(sha, owner="alice").status == "ready"
    store.read(sha, owner="alice")


def test_a_retired_source_uploaded_again_is_a_new_record_and_history_stays(store) -> None:
    data = source(seed=9)
    sha = _add(store, data).record.sha256
    store.retire(sha, owner="alice")
    again = _add(store, data)
    assert again.created
    assert again.record.status == "ready"
    statuses = [r.status for r in store.list("alice", include_retired=True)]
    assert statuses == ["retired", "ready"]
    assert store.read(sha, owner="alice") == data


@pytest.mark.parametrize(
    ("quotas", "limit"),
    [
        (StoreQuotas(max_sources_per_owner=1), "sources per owner"),
        (StoreQuotas(max_bytes_per_owner=40_000), "source bytes per owner"),
        (StoreQuotas(max_total_bytes=40_000), "source store bytes"),
    ],
)
def test_quotas_refuse_an_upload_with_a_typed_limit(backing, quotas, limit) -> None:
    store = backing.open(quotas=quotas)
    _add(store, source(seed=10))  # 32,044 bytes
    with pytest.raises(SourceQuotaError) as refused:
        _add(store, source(seed=11))
    assert refused.value.limit == limit
    assert refused.value.code == "source_quota"
    assert len(store.list("alice")) == 1
    assert backing.staged() == 0
    store.close()


def test_a_full_store_refuses_another_owners_bytes_as_it_refuses_fresh_ones(backing) -> None:
    """No existence oracle (issue #35): with the store full, bytes alice holds are refused
    to bob exactly as bytes nobody sent (the total charges each owner's record)."""
    store = backing.open(quotas=StoreQuotas(max_total_bytes=40_000))
    held, fresh = source(seed=12), source(seed=19)
    _add(store, held)
    refusals = []
    for data in (held, fresh):
        with pytest.raises(SourceQuotaError) as refused:
            _add(store, data, owner="bob")
        refusals.append(str(refused.value).replace(hashlib.sha256(data).hexdigest(), "X"))
    assert refusals[0] == refusals[1]
    assert store.list("bob") == []
    store.close()


def test_recovery_removes_unfinished_uploads_quarantines_orphans_and_marks_lost_records(
    backing,
) -> None:
    store = backing.open()
    kept, gone, damaged = source(seed=13), source(seed=14), source(seed=15)
    kept_sha = _add(store, kept).record.sha256
    gone_sha = _add(store, gone).record.sha256
    damaged_sha = _add(store, damaged).record.sha256
    retired_sha = _add(store, source(seed=16)).record.sha256
    store.retire(retired_sha, owner="alice")
    store.close()
    backing.lose(gone_sha)
    # Same size: only the digest tells.
    backing.write_blob(damaged_sha, b"\x00" * backing.blob_size(damaged_sha))
    backing.leave_unfinished()
    backing.write_blob("f" * 64, b"orphan")

    reopened = backing.open()
    report = reopened.recovery
    assert (report.unfinished_removed, report.orphans_removed, report.lost) == (1, 0, 1)
    # A blob nothing accounts for is set aside, never deleted.
    assert (report.quarantined, report.rebuilt) == (1, 0)
    assert "f" * 64 not in backing.blobs()
    assert report.retired_kept == 1
    assert not report.verified
    assert reopened.get(gone_sha, owner="alice").status == "lost"
    with pytest.raises(SourceLostError):
        reopened.lease(gone_sha, owner="alice")
    # Not verified at open: the first read checks the digest and marks it lost.
    with pytest.raises(SourceLostError):
        reopened.lease(damaged_sha, owner="alice")
    assert reopened.get(damaged_sha, owner="alice").status == "lost"
    assert reopened.read(kept_sha, owner="alice") == kept
    assert reopened.get(retired_sha, owner="alice").status == "retired"
    # Uploading the lost bytes again brings the source back.
    assert _add(reopened, gone).created
    assert reopened.read(gone_sha, owner="alice") == gone
    reopened.close()


def test_verify_recomputes_every_digest_at_open(backing) -> None:
    store = backing.open()
    sha = _add(store, source(seed=17)).record.sha256
    store.close()
    backing.write_blob(sha, b"\x01" * backing.blob_size(sha))
    reopened = backing.open(verify=True)
    assert reopened.recovery.lost == 1
    assert reopened.recovery.verified
    assert reopened.get(sha, owner="alice").status == "lost"
    reopened.close()


def test_features_persist_while_the_source_lives(store, backing) -> None:
    sha = _add(store, source(seed=18)).record.sha256
    assert store.get_features(sha, "k1") is None
    store.put_features(sha, "k1", b"features")
    assert store.get_features(sha, "k1") == b"features"
    store.close()
    reopened = backing.open()
    assert reopened.get_features(sha, "k1") == b"features"
    reopened.retire(sha, owner="alice")
    assert reopened.get_features(sha, "k1") is None
    reopened.put_features(sha, "k1", b"late")  # a retired source keeps no features
    assert reopened.get_features(sha, "k1") is None
    assert backing.features(sha) == 0
    assert backing.staged() == 0
    reopened.close()


def test_malformed_digests_are_refused(store) -> None:
    with pytest.raises(ValueError, match="64 lowercase"):
        store.get("ABC", owner="alice")
    with pytest.raises(ValueError, match="64 lowercase"):
        store.put_features("../x", "k", b"")


def test_many_threads_uploading_the_same_bytes_make_one_blob_and_one_record(store, backing) -> None:
    data = source(seed=19)
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def upload() -> None:
        barrier.wait()
        results.append(_add(store, data).created)

    threads = [threading.Thread(target=upload) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 15 + [True]
    assert len(store.list("alice", include_retired=True)) == 1
    assert len(backing.blobs()) == 1
    assert backing.staged() == 0
