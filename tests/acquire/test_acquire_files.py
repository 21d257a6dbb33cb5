"""Local files under a temporary media root: confinement, file types, races, bounded reads."""

from __future__ import annotations

import asyncio
import os
import re
import threading
from pathlib import Path

import pytest
from acquire_helpers import audio_url, input_audio, wav

from audiogate.acquire import AcquisitionPolicy, acquire_parts, acquire_paths
from audiogate.acquire.context import CHUNK_BYTES, ClipContext, RequestBudget, SourceRefused
from audiogate.acquire.files import (
    NO_MEDIA_ROOT_MESSAGE,
    open_confined,
    read_media_file,
    resolve_media_path,
    validate_media_name,
)
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import AcquisitionError, LimitError, PreprocessCancelled

pytestmark = pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="POSIX only")

CLIP = wav(800)


def ctx(max_bytes: int = 1 << 30, cancel: CancelToken | None = None) -> ClipContext:
    budget = RequestBudget(max_bytes_per_clip=max_bytes, max_bytes_per_request=1 << 30)
    return ClipContext(clip_index=0, cap=budget.cap(0), cancel=cancel or CancelToken())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    media = tmp_path / "media"
    (media / "sub").mkdir(parents=True)
    (media / "ok.wav").write_bytes(CLIP)
    (media / "sub" / "nested.wav").write_bytes(CLIP)
    (tmp_path / "secret.wav").write_bytes(CLIP)
    return media


def read(root: Path, value: str, **kwargs) -> bytes:
    return read_media_file(root, value, ctx(**kwargs))


@pytest.mark.parametrize(
    "value",
    ["ok.wav", "/ok.wav", "file://ok.wav", "file:///ok.wav", "FILE:///ok.wav", "///ok.wav"],
)
def test_names_resolve_inside_the_root(root, value):
    assert read(root, value) == CLIP


@pytest.mark.parametrize("value", ["sub/nested.wav", "file:///sub/nested.wav", "sub//nested.wav"])
def test_subdirectories_are_allowed(root, value):
    assert read(root, value) == CLIP


def test_an_absolute_looking_path_is_concatenated_not_joined(root):
    with pytest.raises(SourceRefused, match="does not exist or cannot be opened"):
        read(root, "file:///etc/passwd")
    with pytest.raises(SourceRefused, match="does not exist"):
        read(root, str(root.parent / "secret.wav"))


def test_without_a_root_local_files_are_refused_with_mlxcels_sentence():
    with pytest.raises(SourceRefused) as caught:
        read_media_file(None, "ok.wav", ctx())
    assert caught.value.detail == NO_MEDIA_ROOT_MESSAGE
    with pytest.raises(AcquisitionError, match="not allowed unless a media root") as error:
        asyncio.run(acquire_parts([audio_url("file:///ok.wav")], policy=AcquisitionPolicy()))
    assert (error.value.clip_index, error.value.origin) == (0, "file")


@pytest.mark.parametrize(
    "name",
    [
        "../secret.wav",
        "sub/../../secret.wav",
        "..",
        "a..b.wav",
        ".",
        "ok.wav.",
        " ok.wav",
        "ok.wav ",
        "%2e%2e/secret.wav",
        "%2E%2E/secret.wav",
        "sub%2fnested.wav",
        "sub%5Cnested.wav",
        "ok.wav%00.png",
        "sub\\nested.wav",
        "ok\x00.wav",
        "ok\n.wav",
        "ok\x7f.wav",
        "ok\x85.wav",
        "ok\uff0ewav",
        "sub\u2215nested.wav",
        "sub\u2216nested.wav",
        "ok\ufffd.wav",
        "\ufeffok.wav",
        "ok" + chr(0xD800) + ".wav",
        "c:ok.wav",
        "ok*.wav",
        "ok?.wav",
        'ok".wav',
        "ok<.wav",
        "ok>.wav",
        "ok|.wav",
        "",
        "/",
        "///",
    ],
)
def test_filename_validation_refuses_traversal_and_tricky_characters(root, name):
    with pytest.raises(SourceRefused, match="file path is not allowed"):
        validate_media_name(name)


def test_names_are_limited_to_255_bytes():
    assert validate_media_name("a" * 255) == "a" * 255
    assert validate_media_name("é" * 127 + "a") == "é" * 127 + "a"  # 255 bytes
    with pytest.raises(SourceRefused, match="256 bytes, more than 255"):
        validate_media_name("a" * 256)
    with pytest.raises(SourceRefused, match="256 bytes"):
        validate_media_name("é" * 128)


def test_percent_twenty_and_dots_inside_names_are_fine(root):
    (root / "my%20clip.v1.wav").write_bytes(CLIP)
    assert read(root, "my%20clip.v1.wav") == CLIP


def test_a_symlink_pointing_outside_the_root_is_refused(root):
    (root / "link.wav").symlink_to(root.parent / "secret.wav")
    with pytest.raises(SourceRefused, match="escapes the media root"):
        read(root, "link.wav")


def test_a_symlinked_directory_component_cannot_escape_either(root):
    (root / "out").symlink_to(root.parent, target_is_directory=True)
    with pytest.raises(SourceRefused, match="escapes the media root"):
        read(root, "out/secret.wav")


def test_a_symlink_that_stays_inside_the_root_still_resolves(root):
    (root / "alias.wav").symlink_to(root / "sub" / "nested.wav")
    (root / "alias_dir").symlink_to(root / "sub", target_is_directory=True)
    assert read(root, "alias.wav") == CLIP
    assert read(root, "alias_dir/nested.wav") == CLIP


def test_a_symlink_swapped_in_after_resolution_is_not_followed(root):
    resolved = resolve_media_path(root, "ok.wav")
    (root / "ok.wav").unlink()
    (root / "ok.wav").symlink_to(root.parent / "secret.wav")
    with pytest.raises(SourceRefused, match="symbolic link was swapped in"):
        open_confined(resolved)


def test_a_directory_swapped_for_a_symlink_after_resolution_is_not_followed(root):
    resolved = resolve_media_path(root, "sub/nested.wav")
    (root / "sub").rename(root / "sub-old")
    outside = root.parent / "elsewhere"
    outside.mkdir()
    (outside / "nested.wav").write_bytes(b"not yours")
    (root / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SourceRefused, match="symbolic link was swapped in"):
        open_confined(resolved)


def test_a_directory_is_not_a_media_file(root):
    with pytest.raises(SourceRefused, match=re.escape("not a regular file (a directory)")):
        read(root, "sub")
    with pytest.raises(SourceRefused, match=r"not a regular file|names the media root"):
        read(root, "/")


def _in_thread_with_deadline(work):
    """Run ``work`` in a thread; report whether it finished (a blocked open would not)."""
    outcome: list[BaseException | object] = []
    thread = threading.Thread(target=lambda: outcome.append(_capture(work)), daemon=True)
    thread.start()
    thread.join(10)
    return thread, outcome


def _capture(work):
    try:
        return work()
    except BaseException as exc:
        return exc


def test_a_fifo_inside_the_root_is_refused_before_it_can_block(root):
    fifo = root / "pipe.wav"
    os.mkfifo(fifo)
    thread, outcome = _in_thread_with_deadline(lambda: read(root, "pipe.wav"))
    if thread.is_alive():  # unblock the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opening a FIFO blocked")
    assert isinstance(outcome[0], SourceRefused)
    assert "not a regular file (a FIFO)" in str(outcome[0])


def test_a_device_reached_through_a_symlink_is_refused(root):
    (root / "zero.wav").symlink_to("/dev/zero")
    with pytest.raises(SourceRefused, match="escapes the media root"):
        read(root, "zero.wav")


@pytest.mark.parametrize("kind", ["missing", "removed", "a file"])
def test_a_media_root_that_is_not_a_directory_is_refused_without_naming_it(tmp_path, kind):
    root = tmp_path / "srv-private-audio"
    if kind == "removed":
        root.mkdir()
        root.rmdir()
    elif kind == "a file":
        root.write_bytes(CLIP)
    with pytest.raises(SourceRefused, match="the media root is not available") as caught:
        read(root, "ok.wav")
    assert "srv-private-audio" not in caught.value.detail


def test_a_missing_file_reports_a_neutral_message(root):
    with pytest.raises(
        SourceRefused, match=re.escape("file does not exist or cannot be opened: 'nope.wav'")
    ):
        read(root, "nope.wav")


def test_the_size_is_checked_before_reading(root):
    with pytest.raises(LimitError) as caught:
        read(root, "ok.wav", max_bytes=len(CLIP) - 1)
    assert (caught.value.limit, caught.value.actual) == ("encoded bytes per clip", len(CLIP))


class HookToken(CancelToken):
    """A token that runs ``hook(n)`` at its n-th check: a seam between read chunks."""

    __slots__ = ("calls", "hook")

    def __init__(self, hook) -> None:
        super().__init__()
        self.calls = 0
        self.hook = hook

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        self.calls += 1
        self.hook(self.calls, self)
        super().check(checkpoint, clip_index)


@pytest.fixture
def big(root: Path) -> Path:
    path = root / "big.wav"
    path.write_bytes(wav(3 * CHUNK_BYTES // 2))  # a little over three chunks
    return path


def test_a_file_that_grows_while_it_is_read_is_refused(root, big):
    def grow(n, _token):
        if n == 3:
            with big.open("ab") as f:
                f.write(b"\0" * 10)

    with pytest.raises(SourceRefused, match="changed while it was read"):
        read_media_file(root, "big.wav", ctx(cancel=HookToken(grow)))


def test_a_file_rewritten_in_place_while_it_is_read_is_refused(root, big):
    def rewrite(n, _token):
        if n == 3:
            os.utime(big, ns=(1, 1))  # same size, new mtime

    with pytest.raises(SourceRefused, match="changed while it was read"):
        read_media_file(root, "big.wav", ctx(cancel=HookToken(rewrite)))


def _rewrite_same_size(path: Path, *, keep_mtime: bool) -> None:
    """Overwrite ``path`` in place (same inode, same size), new bytes from the start."""
    before = path.stat()
    data = path.read_bytes()
    with path.open("r+b") as f:
        f.write(bytes(255 - b for b in data[: 2 * CHUNK_BYTES]))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_same_size_rewrite_with_the_mtime_put_back_is_refused(root, big):
    # Size, mtime and inode are what they were: only the ctime (and the bytes) tell.
    def rewrite(n, _token):
        if n == 3:
            _rewrite_same_size(big, keep_mtime=True)

    with pytest.raises(SourceRefused, match="changed while it was read"):
        read_media_file(root, "big.wav", ctx(cancel=HookToken(rewrite)))


@pytest.mark.parametrize("when", [3, 6], ids=["during-the-read", "during-the-check"])
def test_a_rewrite_the_timestamps_miss_is_refused_by_the_second_read(root, big, monkeypatch, when):
    # Timestamps are clock ticks: a rewrite within the tick of the last change leaves
    # them as they were. Simulated here by a stat check that looks at size and inode only.
    import audiogate.acquire.files as files

    monkeypatch.setattr(files, "_identity", lambda st: (st.st_size, st.st_ino, st.st_dev))

    def rewrite(n, _token):
        if n == when:
            _rewrite_same_size(big, keep_mtime=True)

    with pytest.raises(SourceRefused, match="changed while it was read"):
        read_media_file(root, "big.wav", ctx(cancel=HookToken(rewrite)))
    assert read_media_file(root, "big.wav", ctx()) == big.read_bytes()  # unchanged now


def test_a_file_replaced_while_it_is_read_is_refused(root, big):
    def replace(n, _token):
        if n == 3:
            (root / "other.wav").write_bytes(big.read_bytes())
            os.replace(root / "other.wav", big)

    with pytest.raises(SourceRefused, match="removed or replaced"):
        read_media_file(root, "big.wav", ctx(cancel=HookToken(replace)))


def test_a_file_that_grows_past_the_cap_is_refused_by_the_running_cap(root, big):
    size = big.stat().st_size

    def grow(n, _token):
        if n == 2:
            with big.open("ab") as f:
                f.write(b"\0" * (4 * CHUNK_BYTES))

    with pytest.raises(LimitError, match="encoded bytes per clip"):
        read_media_file(root, "big.wav", ctx(max_bytes=size + 10, cancel=HookToken(grow)))


def test_local_acquisition_cancels_between_bounded_read_chunks(root, big):
    seen: list[int] = []

    def cancel_after_first_chunk(n, token):
        seen.append(n)
        if n == 2:
            token.cancel()

    with pytest.raises(PreprocessCancelled) as caught:
        read_media_file(root, "big.wav", ctx(cancel=HookToken(cancel_after_first_chunk)))
    assert (caught.value.checkpoint, caught.value.clip_index) == ("Acquisition", 0)


def test_request_paths_go_through_acquire_parts_as_file_origin(root):
    policy = AcquisitionPolicy(media_root=root)
    clips = asyncio.run(
        acquire_parts([audio_url("file:///ok.wav"), input_audio("sub/nested.wav")], policy=policy)
    )
    assert [(c.ordinal, c.origin, c.data) for c in clips] == [(1, "file", CLIP), (2, "file", CLIP)]
    with pytest.raises(AcquisitionError, match=r"escapes|not allowed") as caught:
        asyncio.run(acquire_parts([audio_url("ok.wav"), audio_url("../x.wav")], policy=policy))
    assert (caught.value.clip_index, caught.value.origin) == (1, "file")


def test_cancelling_the_awaiting_task_stops_the_reading_thread(root, big):
    """The thread reading a file polls a token that the cancelled task trips."""
    in_thread = threading.Event()
    release = threading.Event()
    worker_checks: list[str] = []

    class Gate(CancelToken):
        """Holds the reading thread at its first check until the task has been cancelled."""

        __slots__ = ()

        def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
            if threading.current_thread() is not threading.main_thread():
                worker_checks.append(threading.current_thread().name)
                in_thread.set()
                release.wait(10)
            super().check(checkpoint, clip_index)

    policy = AcquisitionPolicy(media_root=root)

    async def scenario() -> None:
        task = asyncio.create_task(
            acquire_parts([audio_url("big.wav")], policy=policy, cancel=Gate())
        )
        assert await asyncio.to_thread(in_thread.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    asyncio.run(scenario())  # returns once the executor's threads have finished
    # Without the linked token the thread would have read all four chunks.
    assert len(worker_checks) == 1


# --- the CLI's own paths -------------------------------------------------------------


def test_cli_paths_need_no_media_root_and_follow_the_users_symlinks(tmp_path, root):
    (tmp_path / "mine.wav").symlink_to(root / "ok.wav")
    clips = acquire_paths([root / "ok.wav", str(tmp_path / "mine.wav")], policy=AcquisitionPolicy())
    assert [(c.ordinal, c.origin, c.data) for c in clips] == [(1, "file", CLIP), (2, "file", CLIP)]


@pytest.mark.parametrize("name", ["bad\x00path.wav", "bad\ud800.wav"])
def test_cli_paths_the_os_cannot_take_are_a_typed_refusal(name):
    # An embedder's string: argv cannot carry these, os.open raises ValueError on them.
    with pytest.raises(AcquisitionError, match="not a valid path") as caught:
        acquire_paths([name], policy=AcquisitionPolicy())
    assert caught.value.clip_index == 0


def test_cli_paths_are_regular_files_only(tmp_path, root):
    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    for path, kind in ((root / "sub", "a directory"), (fifo, "a FIFO"), ("/dev/null", "a device")):
        thread, outcome = _in_thread_with_deadline(
            lambda p=path: acquire_paths([p], policy=AcquisitionPolicy())
        )
        assert not thread.is_alive(), f"{path} blocked"
        assert isinstance(outcome[0], AcquisitionError)
        assert f"not a regular file ({kind})" in str(outcome[0])
        assert outcome[0].origin == "file"


def test_cli_paths_keep_the_caps_and_the_change_check(tmp_path, root, big):
    with pytest.raises(LimitError, match="clip count"):
        acquire_paths([root / "ok.wav"] * 3, policy=AcquisitionPolicy(max_clips=2))
    with pytest.raises(LimitError) as caught:
        acquire_paths([big], policy=AcquisitionPolicy(max_bytes_per_clip=1000))
    assert caught.value.actual == big.stat().st_size

    def grow(n, _token):
        if n == 3:
            with big.open("ab") as f:
                f.write(b"\0")

    with pytest.raises(AcquisitionError, match="changed while it was read") as error:
        acquire_paths([big], policy=AcquisitionPolicy(), cancel=HookToken(grow))
    assert (error.value.clip_index, error.value.origin) == (0, "file")
    with pytest.raises(AcquisitionError, match="does not exist"):
        acquire_paths([tmp_path / "missing.wav"], policy=AcquisitionPolicy())
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(AcquisitionError, match="empty"):
        acquire_paths([tmp_path / "empty.wav"], policy=AcquisitionPolicy())


# --- a rewrite still going on: the settle wait -------------------------------------------


@pytest.fixture
def settle(monkeypatch):
    """The settle wait as deployed (the suite turns it off), with its sleeps recorded and
    ``hook`` run at the first one: the file changes while it is held."""
    from audiogate.acquire import files

    monkeypatch.setenv(files.SETTLE_ENV, str(files.SETTLE_S))
    state = {"slept": [], "hook": None}
    real = files._sleep

    def sleep(seconds):
        state["slept"].append(seconds)
        hook, state["hook"] = state["hook"], None
        if hook is not None:
            hook()
        real(seconds)

    monkeypatch.setattr(files, "_sleep", sleep)
    return state


def test_a_rewrite_in_pieces_still_going_on_is_refused(root, settle):
    old, new = wav(4000), wav(4000, rate_hz=8000)
    assert len(old) == len(new)
    path = root / "ok.wav"
    path.write_bytes(old)
    half = len(new) // 2
    with open(path, "r+b") as writer:  # the first half rewritten: the file is torn now
        writer.write(new[:half])
        writer.flush()

        def second_half():
            writer.write(new[half:])
            writer.flush()

        settle["hook"] = second_half
        # Both passes of the read see the same torn bytes; the settle wait sees the rest.
        with pytest.raises(SourceRefused, match="changed while it was read"):
            read(root, "ok.wav")
    assert settle["slept"]
    assert read(root, "ok.wav") == new  # complete now: read after its wait


def test_a_file_changed_just_now_is_read_after_the_wait(root, settle):
    (root / "fresh.wav").write_bytes(CLIP)
    assert read(root, "fresh.wav") == CLIP
    assert 0 < sum(settle["slept"]) <= 0.25 + 1e-6


def test_a_file_not_changed_lately_is_read_without_waiting(root, settle):
    path = root / "old.wav"
    path.write_bytes(CLIP)
    with pytest.MonkeyPatch.context() as patch:  # as if written a minute ago
        import time as time_module

        real = time_module.time_ns
        patch.setattr(time_module, "time_ns", lambda: real() + 60 * 10**9)
        assert read(root, "old.wav") == CLIP
    assert settle["slept"] == []


def test_the_settle_wait_is_cancelled_with_the_request(root, settle):
    (root / "fresh.wav").write_bytes(CLIP)
    token = CancelToken()
    settle["hook"] = token.cancel
    with pytest.raises(PreprocessCancelled):
        read(root, "fresh.wav", cancel=token)


@pytest.mark.parametrize("value", ["-1", "11", "soon"])
def test_a_bad_settle_setting_is_refused_naming_the_variable(monkeypatch, value):
    from audiogate.acquire import files

    monkeypatch.setenv(files.SETTLE_ENV, value)
    with pytest.raises(ValueError, match=files.SETTLE_ENV):
        files.settle_seconds()
