"""Local files: request paths confined to a media root, and the CLI's own paths.

A request's ``file://`` URL or bare path (mlxcel ``src/server/media_root.rs``,
llama.cpp's ``--media-path``):

1. refused unless a media root is configured;
2. the name is validated (:func:`validate_media_name`): no ``..``, no percent-encoded
   ``.``/``/``/``\\``/NUL, no control or look-alike characters, at most 255 bytes;
3. leading ``/`` are stripped and the rest is *concatenated* under the root, never
   joined, so ``file:///etc/passwd`` means ``<root>/etc/passwd``;
4. the canonical path (symlinks resolved) must stay inside the canonical root; a symlink
   that stays inside is fine;
5. the file is opened by walking from the root directory one component at a time with
   ``O_NOFOLLOW`` (and ``O_DIRECTORY`` for directories), so a symlink swapped in after
   step 4 — at the last component *or* a directory above it — is refused instead of
   followed; ``O_NONBLOCK`` keeps a FIFO from blocking the open;
6. only a regular file is read (``fstat``), its size is checked against the cap first,
   then it is read in 64 KiB chunks under a running cap with a cancel check per chunk;
7. a file that changes while it is read is refused: its size, ``st_mtime_ns``,
   ``st_ctime_ns``, inode and device must be the same before, between and after two
   reads, the second read must give the same bytes as the first (file timestamps are
   kernel clock ticks, a few milliseconds apart: a same-size rewrite within one tick
   leaves them as they were, and ``futimens`` can put the mtime back, though not the
   ctime), and the name must still lead to the file afterwards; a file changed less than
   :data:`SETTLE_S` before the read is held until its last change is that old and
   compared once more, so a rewrite in pieces that is still going on is refused. What
   remains: a writer that stops for longer than :data:`SETTLE_S` in the middle of a
   rewrite leaves a file whose bytes are half old, half new, and it is read as such (no
   reader can tell those bytes from a file written that way; write to a temporary name
   and rename to replace a file atomically).

The CLI's paths (:func:`read_local_path`) skip 1–5 (they are the user's own files and
may be symlinks) but keep 6 and 7. POSIX only: without ``O_NOFOLLOW`` local files are
refused.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs

from audiogate.acquire.context import CHUNK_BYTES, ClipContext, SourceRefused

__all__ = [
    "MAX_NAME_BYTES",
    "MEDIA_ROOT_MISSING_MESSAGE",
    "NO_MEDIA_ROOT_MESSAGE",
    "ResolvedPath",
    "open_confined",
    "read_local_path",
    "read_media_file",
    "resolve_media_path",
    "strip_file_scheme",
    "validate_media_name",
]

#: Longest accepted name in UTF-8 bytes (llama.cpp ``fs_validate_filename``).
MAX_NAME_BYTES: Final = 255

#: The refusal when no media root is configured (mlxcel's ``NO_MEDIA_ROOT_MESSAGE``, adapted).
NO_MEDIA_ROOT_MESSAGE: Final = (
    "file:// URLs and local paths are not allowed unless a media root is configured "
    "(AcquisitionPolicy.media_root)"
)

#: The refusal when the configured media root is not (or no longer) a directory; it does
#: not name the root, a server path.
MEDIA_ROOT_MISSING_MESSAGE: Final = (
    "the media root is not available (not a directory); local files cannot be read"
)

# ``:*?"<>|`` (llama.cpp), the backslash (a separator elsewhere), and look-alikes of
# ``.`` and ``/`` plus the replacement and byte-order characters (mlxcel).
_FORBIDDEN: Final = frozenset(':*?"<>|\\\uff0e\u2215\u2216\ufffd\ufeff')
_PERCENT_TRAVERSAL: Final = re.compile(r"%(?:2e|2f|5c|00)", re.IGNORECASE)
_FILE_SCHEME: Final = re.compile(r"file://", re.IGNORECASE)

_HAVE_NOFOLLOW: Final = hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_NOCTTY: Final = getattr(os, "O_NOCTTY", 0)
_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
#: A file changed less than this long before it is read is read, then held this long
#: after its last change and compared again: a rewrite still going on (a writer that
#: pauses between pieces) changes it meanwhile and is refused, where two passes alone
#: would both see the same half-written bytes. Seconds; :data:`SETTLE_ENV` overrides it
#: (``0`` turns the wait off, where every writer renames complete files into place).
SETTLE_S: Final = 0.25
SETTLE_ENV: Final = "AUDIOGATE_FILE_SETTLE_S"


def strip_file_scheme(value: str) -> str:
    """``value`` without a leading ``file://`` (any case); bare paths are unchanged."""
    return value[7:] if _FILE_SCHEME.match(value) else value


def _char_problem(ch: str) -> str | None:
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return "a control character"
    if 0xD800 <= code <= 0xDFFF:
        return "a lone surrogate"
    if ch in _FORBIDDEN:
        return "a forbidden character"
    return None


def validate_media_name(name: str) -> str:
    """Check a request's file name; return it relative to the root (leading ``/`` dropped).

    :raises SourceRefused: ``"file path is not allowed: ..."`` with the rule it breaks.
    """
    if not name:
        raise SourceRefused("file path is not allowed: the name is empty")
    for ch in name:
        problem = _char_problem(ch)
        if problem:
            raise SourceRefused(
                f"file path is not allowed: {name!r} contains {problem} (U+{ord(ch):04X})"
            )
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise SourceRefused(
            f"file path is not allowed: the name is {size} bytes, more than {MAX_NAME_BYTES}"
        )
    if name != name.strip(" "):
        raise SourceRefused(f"file path is not allowed: {name!r} has a leading or trailing space")
    if name == "." or name.endswith("."):
        raise SourceRefused(f"file path is not allowed: {name!r} ends with '.'")
    if ".." in name:
        raise SourceRefused(f"file path is not allowed: {name!r} contains '..'")
    if _PERCENT_TRAVERSAL.search(name):
        raise SourceRefused(
            f"file path is not allowed: {name!r} contains a percent-encoded '.', '/', '\\' or NUL"
        )
    relative = name.lstrip("/")
    if not relative:
        raise SourceRefused(f"file path is not allowed: {name!r} names the media root itself")
    return relative


@attrs.frozen
class ResolvedPath:
    """A request path resolved inside the root: both canonical, ``path`` below ``root``."""

    root: str
    path: str
    name: str

    @property
    def parts(self) -> tuple[str, ...]:
        """The components of ``path`` below ``root``."""
        return tuple(self.path[len(self.root) :].strip("/").split("/"))


def resolve_media_path(root: Path, name: str) -> ResolvedPath:
    """Validate ``name``, concatenate it under ``root`` and canonicalize; stay inside.

    :raises SourceRefused: invalid name, missing file, or a path that escapes the root.
    """
    relative = validate_media_name(name)
    root_canonical = os.path.realpath(root)
    if not os.path.isdir(root_canonical):
        # The root is the server's own path: it is never shown to the client.
        raise SourceRefused(MEDIA_ROOT_MISSING_MESSAGE)
    # Concatenation, not os.path.join: an absolute-looking name stays under the root.
    candidate = root_canonical.rstrip("/") + "/" + relative
    try:
        canonical = os.path.realpath(candidate, strict=True)
    except OSError:
        raise SourceRefused(f"file does not exist or cannot be opened: {name!r}") from None
    inside = root_canonical.rstrip("/") + "/"
    if not canonical.startswith(inside):
        if canonical == root_canonical:
            raise SourceRefused(f"file is not a regular file (a directory): {name!r}")
        raise SourceRefused(f"file path escapes the media root: {name!r}")
    return ResolvedPath(root=root_canonical, path=canonical, name=name)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _open_error(exc: OSError, name: str) -> SourceRefused:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return SourceRefused(
            f"file path changed after it was resolved (a symbolic link was swapped in): {name!r}"
        )
    return SourceRefused(f"file does not exist or cannot be opened: {name!r}")


def open_confined(resolved: ResolvedPath) -> tuple[int, int]:
    """Open ``resolved`` from its root without following any symlink.

    :returns: ``(fd, parent_fd)``: the file (checked regular) and its directory, both to
        be closed by the caller.
    :raises SourceRefused: a component became a symlink or vanished, or the target is
        not a regular file.
    """
    if not _HAVE_NOFOLLOW:
        raise SourceRefused("local files need O_NOFOLLOW, which this platform lacks")
    parts = resolved.parts
    directory = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
    try:
        parent = os.open(resolved.root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise _open_error(exc, resolved.name) from None
    try:
        for part in parts[:-1]:
            child = os.open(part, directory, dir_fd=parent)
            os.close(parent)
            parent = child
        fd = os.open(
            parts[-1],
            os.O_RDONLY | os.O_NOFOLLOW | _NONBLOCK | _NOCTTY | _CLOEXEC,
            dir_fd=parent,
        )
    except OSError as exc:
        os.close(parent)
        raise _open_error(exc, resolved.name) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        os.close(parent)
        raise SourceRefused(f"file is not a regular file ({_kind(mode)}): {resolved.name!r}")
    return fd, parent


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _read_fd(fd: int, ctx: ClipContext, name: str, restat: Callable[[], os.stat_result]) -> bytes:
    try:
        return _read_checked(fd, ctx, name, restat)
    except OSError as exc:
        raise SourceRefused(f"file could not be read: {name!r} ({exc.strerror})") from None


def _read_checked(
    fd: int, ctx: ClipContext, name: str, restat: Callable[[], os.stat_result]
) -> bytes:
    before = os.fstat(fd)
    size = before.st_size
    ctx.cap.check(size)
    ctx.hold(size)  # before reading: the read below never grows past it
    pieces: list[bytes] = []
    total = 0
    while True:
        ctx.check_cancel()
        chunk = os.read(fd, CHUNK_BYTES)
        if not chunk:
            break
        total += len(chunk)
        ctx.cap.check(total)
        if total > size:
            raise SourceRefused(
                f"file changed while it was read (grew past {size} bytes): {name!r}"
            )
        pieces.append(chunk)
    ctx.check_cancel()
    if total != size:
        raise SourceRefused(f"file changed while it was read: {name!r}")
    try:
        now = restat()
    except OSError:
        raise SourceRefused(f"file was removed or replaced while it was read: {name!r}") from None
    if (now.st_ino, now.st_dev) != (before.st_ino, before.st_dev):
        raise SourceRefused(f"file was removed or replaced while it was read: {name!r}")
    if _identity(os.fstat(fd)) != _identity(before):
        raise SourceRefused(f"file changed while it was read: {name!r}")
    _check_unchanged(fd, pieces, before, ctx, name)
    if _settle(before, ctx):
        # Changed within the settle window before the read: it may have been read half-way
        # through a rewrite that goes on. Unchanged since, the bytes are the file's.
        _check_unchanged(fd, pieces, before, ctx, name)
    return b"".join(pieces)


def _check_unchanged(
    fd: int, pieces: list[bytes], before: os.stat_result, ctx: ClipContext, name: str
) -> None:
    """Another pass over the file gives ``pieces``, and its identity is still ``before``'s."""
    _verify(fd, pieces, ctx, name)
    if _identity(os.fstat(fd)) != _identity(before):
        raise SourceRefused(f"file changed while it was read: {name!r}")


def _settle(before: os.stat_result, ctx: ClipContext) -> bool:
    """Wait until the file's last change (``st_ctime``, which no caller can set) is
    :func:`settle_seconds` old; ``True`` if it had to wait. Polls cancellation as it
    waits."""
    settle_ns = int(settle_seconds() * 1e9)
    # A ctime in the future (a clock set back) waits at most the settle time, never longer.
    remaining = min(before.st_ctime_ns + settle_ns - time.time_ns(), settle_ns)
    if remaining <= 0:
        return False
    end = time.monotonic() + remaining / 1e9
    while (left := end - time.monotonic()) > 0:
        ctx.check_cancel()
        _sleep(min(left, 0.05))
    ctx.check_cancel()
    return True


def settle_seconds() -> float:
    """The settle time: :data:`SETTLE_ENV` if set (seconds, 0 to 10), else :data:`SETTLE_S`.

    :raises ValueError: the variable is not a number in that range.
    """
    given = os.environ.get(SETTLE_ENV, "").strip()
    if not given:
        return SETTLE_S
    try:
        value = float(given)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 10.0:
        raise ValueError(f"{SETTLE_ENV} must be a number of seconds from 0 to 10, not {given!r}")
    return value


def _sleep(seconds: float) -> None:
    time.sleep(seconds)  # a seam for the tests: they change the file while it is held


def _verify(fd: int, pieces: list[bytes], ctx: ClipContext, name: str) -> None:
    """Read the file again and compare it with ``pieces``, chunk by chunk (from the page
    cache, at memory speed; nothing more is held): a rewrite the timestamps missed
    gives different bytes in one of the two reads."""
    offset = 0
    for piece in pieces:
        ctx.check_cancel()
        again = os.pread(fd, len(piece), offset)
        if again != piece:
            raise SourceRefused(f"file changed while it was read: {name!r}")
        offset += len(piece)
    if os.pread(fd, 1, offset):
        raise SourceRefused(f"file changed while it was read (it grew): {name!r}")


def read_media_file(root: Path | None, value: str, ctx: ClipContext) -> bytes:
    """Read a request's ``file://`` URL or bare path from inside ``root``.

    :param root: the configured media root, or ``None`` (then always refused).
    :param value: the source as given (``file://`` prefix optional).
    :raises SourceRefused: see the module docstring.
    :raises LimitError: the file is larger than ``ctx.cap``.
    :raises PreprocessCancelled: cancelled between chunks.
    """
    if root is None:
        raise SourceRefused(NO_MEDIA_ROOT_MESSAGE)
    name = strip_file_scheme(value)
    resolved = resolve_media_path(root, name)
    ctx.check_cancel()
    fd, parent = open_confined(resolved)
    last = resolved.parts[-1]
    try:
        return _read_fd(fd, ctx, name, lambda: os.stat(last, dir_fd=parent, follow_symlinks=False))
    finally:
        os.close(fd)
        os.close(parent)


def read_local_path(path: str | os.PathLike[str], ctx: ClipContext) -> bytes:
    """Read one of the CLI user's own files: regular files only, bounded and checked.

    Symlinks are followed (it is the user's own path); FIFOs, devices and directories are
    refused without blocking.

    :raises SourceRefused: missing, not a regular file, or changed while read.
    :raises LimitError: larger than ``ctx.cap``.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | _NONBLOCK | _NOCTTY | _CLOEXEC)
    except OSError as exc:
        raise SourceRefused(
            f"file does not exist or cannot be opened: {name!r} ({exc.strerror})"
        ) from None
    except (ValueError, UnicodeError):  # a NUL byte, or a lone surrogate the OS cannot take
        raise SourceRefused(f"file name is not a valid path: {name!r}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SourceRefused(f"file is not a regular file ({_kind(mode)}): {name!r}")
        return _read_fd(fd, ctx, name, lambda: os.stat(name))
    finally:
        os.close(fd)
