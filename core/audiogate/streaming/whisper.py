"""The Whisper log-mel frontend, computed while 16 kHz samples arrive.

:class:`WhisperLogMelStream` gives exactly :func:`audiogate.dsp.whisper.whisper_log_mel`
of the concatenated samples, under the plan :func:`~audiogate.dsp.whisper.whisper_plan`
makes for their final length, whatever the chunking.

What is computed as samples arrive: every *interior* frame (its 400-sample window lies
inside one item's samples: frames ``t >= 2`` with ``160t + 200 <= n`` for the ``n`` item
samples received so far), in blocks of :data:`STREAM_BLOCK_FRAMES` (up to
:data:`~audiogate.dsp.whisper.BLOCK_FRAMES`), and the two head frames (they read the
reflection of samples 1..200) with the first interior block, into the scaled log domain
``log10(mel) / 4 + 1``, with the item's running maximum. These frames do not depend on
the clip's final length or padding. An item is the whole clip, except in ``"windows"``
mode, where each 30 s window is its own item. Each block is clamped as it is made to the
item's running maximum minus 8 when one of its values is under it; since ``max(max(x,
a), b) == max(x, b)`` for ``b >= a`` and the floor is monotone in the maximum, only the
blocks that hold a value under a risen floor and were clamped with a lower one need a
re-clamp: the push that raised the floor re-clamps them (up to :data:`SETTLE_FRAMES`),
and ``finish`` those the last batch's (or its own frames') maximum changes, or that a
push left (none, for a clip whose maximum stops rising early); a rise looks only at the
blocks holding a value under it (:class:`_Item`). Where the window is at most 30 s, or
is the one window of ``"max_length"`` (Qwen2.5-Omni's 300 s), the frames are written
straight into the features array, grown by whole windows, once an item passes
:data:`BUFFERED_FRAMES` frames: no copy at ``finish``; a wider window's padding is filled
by the pushes once the running maximum has held :data:`PREFILL_STEADY_FRAMES` frames.

What remains for :meth:`WhisperLogMelStream.finish`: the frames the pushes left, in as
few kernel calls as blocks allow (one, at most :data:`~audiogate.dsp.whisper.BLOCK_FRAMES`
frames, for the usual tail): the interior frames of the last incomplete block and the
last frames whose window reaches past the clip's end, framed from one short copy (zero
padding, or the end reflection, copied by slices), and a short clip's head frames; the
copy of the buffered frames (``"longest"``, and a clip of at most
:data:`BUFFERED_FRAMES` frames); the re-clamp of the blocks the final maximum changes;
the constant frames of the padding the pushes did not fill; and the mask (a cached
read-only array per geometry).
Every frame's value is computed by the same kernel
(:func:`audiogate.dsp.whisper.log_mel_block`) on the same samples as the whole-clip
path, and the kernel treats frames independently, so the result is bit-identical
(``tests/streaming/test_stream_parity.py``, ``tests/streaming/test_whisper_stream_clamp.py``).

``normalize=True`` (``do_normalize``: the item's mean and variance) is not incremental;
no shipped family uses it, and :class:`WhisperLogMelStream` refuses it.
"""

from __future__ import annotations

import functools
import heapq
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.whisper import (
    BLOCK_FRAMES,
    CHUNK_SAMPLES,
    HOP,
    LOG_FLOOR,
    N_FFT,
    SAMPLE_RATE_HZ,
    Padding,
    WhisperPlan,
    framed,
    log_mel_block,
    padded_segment,
    whisper_plan,
)
from audiogate.dsp.whisper_geometry import interior_frames
from audiogate.errors import PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, ResamplePlan, readonly
from audiogate.streaming.buffer import GrowingArray
from audiogate.streaming.stage import SourceResampler, open_source_resampler

if TYPE_CHECKING:
    from audiogate.pipeline.plans import ClipPlan

__all__ = [
    "FIRST_INTERIOR_FRAME",
    "STREAM_BLOCK_FRAMES",
    "WhisperFeatureStream",
    "WhisperLogMelStream",
    "open_whisper_feature_stream",
]

_PAD: Final = N_FFT // 2
#: Frame ``t`` starts at padded sample ``160t - 200``: frames 0 and 1 read the reflection.
FIRST_INTERIOR_FRAME: Final = -(-_PAD // HOP)
#: Interior frames are computed once this many are ready (0.64 s of audio): few enough
#: that little remains for finish(), enough that a block's fixed cost is spread.
STREAM_BLOCK_FRAMES: Final = 64
#: An item's known samples from which its head frames (``0 .. FIRST_INTERIOR_FRAME``)
#: are final: they read samples ``0 .. 360`` only, and the clip has interior frames.
_HEAD_FINAL_SAMPLES: Final = HOP * FIRST_INTERIOR_FRAME + _PAD
#: The widest window whose frames stream straight into the clip's features (30 s: 1.5
#: MB at 128 mels); a wider one (Qwen2.5-Omni's 300 s) keeps the frames made so far
#: in a buffer of their own and copies them at ``finish`` (its whole window from the
#: first block would hold ten times the bytes of a 30 s clip's frames).
DIRECT_WINDOW_FRAMES: Final = CHUNK_SAMPLES // HOP
#: Frames an item keeps in a buffer of its own before its window is allocated (2.56 s):
#: a short stream (a voice agent's turn) holds 128 kB of frames, not a 1.5 MB window,
#: and copies that little at ``finish``.
BUFFERED_FRAMES: Final = 256
_NO_FLOOR: Final = np.float32(-np.inf)
#: The most frames a push re-clamps when the item's running floor rises (10 s of frames,
#: some 50 us), or four times the frames made since a push last re-clamped if more;
#: more wait for ``finish`` (a clip whose maximum keeps rising would otherwise re-clamp
#: all its frames at every push). The pushes' re-clamps thus cost at most four passes
#: over the frames, and 1,024 frames per rise of the floor.
SETTLE_FRAMES: Final = 1024
#: The frames a wide window's running floor holds before the pushes fill its padding
#: (:meth:`WhisperLogMelStream._prefill`).
PREFILL_STEADY_FRAMES: Final = 256
#: The padding constant's least value, ``(log10(1e-10) + 4) / 4``.
_PAD_CONSTANT: Final = (LOG_FLOOR + np.float32(4.0)) * np.float32(0.25)


def _scaled_floor(peak: np.float32) -> np.float32:
    """The clamp of an item whose largest ``log10`` is ``peak``, in the scaled domain:
    ``(peak - 8 + 4) / 4`` in float32, as the whole-clip kernel computes it (monotone in
    ``peak``)."""
    return np.float32((np.float32(peak - np.float32(8.0)) + np.float32(4.0)) * np.float32(0.25))


class _Item:
    """What one item streamed: its head frames, its interior frames ``[FIRST_INTERIOR_FRAME,
    next)``, its running peak, and per computed block ``(first frame, frames, floor it
    was clamped with, its smallest value before the clamp)``: a push that raises the
    floor, and ``finish``, re-clamp only the blocks that hold a value under it and were
    clamped with a lower one (``max(max(x, a), b) == max(x, b)`` for ``b >= a``);
    after a push the blocks are clamped as the floor ``settled`` asks. So that a rise of the
    floor looks only at the blocks it may change (not all of them), the blocks are
    split by their minimum: ``low`` (positions; ``low_frames`` frames) hold a value
    under a floor seen so far, ``above`` (a heap of ``(minimum, position)``) none.

    ``columns`` (the buffered layout only): the frames ``[shape=(n_mels, capacity)]``,
    column ``t`` frame ``t``, grown four times at each step up to ``limit`` columns.
    """

    __slots__ = (
        "above",
        "blocks",
        "columns",
        "floor",
        "head",
        "limit",
        "low",
        "low_frames",
        "next",
        "peak",
        "settled",
        "settled_at",
    )

    def __init__(self, n_mels: int, limit: int | None) -> None:
        self.next = FIRST_INTERIOR_FRAME
        self.head = False
        self.peak = _NO_FLOOR
        self.floor = _NO_FLOOR  # the scaled floor of ``peak``
        self.blocks: list[tuple[int, int, np.float32, np.float32]] = []
        # Every block is clamped as the floor ``settled`` asks after a push (re-clamped
        # in the pushes when the running floor rises), unless ``settled < floor``.
        self.settled = _NO_FLOOR
        self.settled_at = FIRST_INTERIOR_FRAME  # ``next`` at the last re-clamp in a push
        self.low: list[int] = []
        self.low_frames = 0
        self.above: list[tuple[float, int]] = []
        self.columns = np.empty((n_mels, 0), dtype=np.float32)
        self.limit = limit

    def add_block(self, first: int, count: int, used: np.float32, minimum: np.float32) -> None:
        """Record a computed block (clamped with ``used``; ``minimum`` before the clamp)."""
        position = len(self.blocks)
        self.blocks.append((first, count, used, minimum))
        if minimum >= self.floor:
            heapq.heappush(self.above, (float(minimum), position))
        else:  # under the floor, or NaN
            self.low.append(position)
            self.low_frames += count

    def sink(self, floor: np.float32) -> None:
        """Move the blocks holding a value under ``floor`` from ``above`` to ``low``."""
        while self.above and self.above[0][0] < floor:
            _, position = heapq.heappop(self.above)
            self.low.append(position)
            self.low_frames += self.blocks[position][1]

    @property
    def done(self) -> int:
        """Frames computed."""
        return self.next - FIRST_INTERIOR_FRAME + (FIRST_INTERIOR_FRAME if self.head else 0)

    def capacity_for(self, frames: int) -> int:
        """The columns' capacity once they hold frames ``0 .. frames``."""
        capacity = self.columns.shape[1]
        if frames <= capacity:
            return capacity
        grown = max(frames, 4 * capacity, 256)
        return grown if self.limit is None else max(frames, min(grown, self.limit))

    def column_block(self, first: int, count: int) -> npt.NDArray[np.float32]:
        """Columns ``first .. first + count`` (grown as needed), for a block."""
        stop = first + count
        if stop > self.columns.shape[1]:
            grown = np.empty((self.columns.shape[0], self.capacity_for(stop)), np.float32)
            grown[:, : self.columns.shape[1]] = self.columns
            self.columns = grown
        return self.columns[:, first:stop]


class WhisperLogMelStream:
    """One clip's Whisper log-mel, fed 16 kHz mono float32 samples in chunks of any size.

    Frames are written where the clip's features keep them: for a window of at most
    :data:`DIRECT_WINDOW_FRAMES` frames (every mode but ``"longest"``), into the
    features array itself ``[shape=(windows, n_mels, window_frames)]``, grown by whole
    windows, once an item passes :data:`BUFFERED_FRAMES` frames (or a second item
    starts), so ``finish`` copies nothing; otherwise (and before that) into a buffer per
    item, copied into the features at ``finish``. Each block is clamped as it is made
    with the item's running maximum minus 8 when it holds a value under it; ``finish``
    re-clamps only the blocks the final maximum changes.

    :param n_mels: 80 or 128.
    :param padding: the mode of :func:`~audiogate.dsp.whisper.whisper_plan`
        (``"max_length"``, ``"longest"``, ``"multiple"`` or ``"windows"``).
    :param chunk_samples: the extractor's ``n_samples``.
    :param clip_index: zero-based clip index (cancellation and errors).
    :param cancel: polled before every computed block.
    :raises ValueError: ``normalize`` is asked for (it needs the whole item).
    """

    def __init__(
        self,
        *,
        n_mels: int,
        padding: Padding,
        chunk_samples: int = CHUNK_SAMPLES,
        normalize: bool = False,
        clip_index: int = 0,
        cancel: CancelToken = NEVER,
    ) -> None:
        if normalize:
            raise ValueError("normalize=True needs the whole item; use the accumulating frontend")
        # Validates the mode, bank and window (a length every mode admits).
        whisper_plan(_PAD + 1, n_mels=n_mels, padding=padding, chunk_samples=chunk_samples)
        self._n_mels = n_mels
        self._padding: Padding = padding
        self._chunk = chunk_samples
        self._window_frames = chunk_samples // HOP
        # One window (``"max_length"``) streams into the features at any width:
        # Qwen2.5-Omni's 300 s window (15.4 MB at 128 mels) once it passes
        # :data:`BUFFERED_FRAMES`, its padding filled in the pushes (:meth:`_prefill`).
        self._direct = padding != "longest" and (
            self._window_frames <= DIRECT_WINDOW_FRAMES or padding == "max_length"
        )
        # The window whose columns ``[pad_from, window_frames)`` hold ``pad_value``
        # (the padding constant of its item's running floor), and ``next`` of that
        # item when the value last changed.
        self._pad_window = -1
        self._pad_from = self._window_frames
        self._pad_value = _NO_FLOOR
        self._pad_since = 0
        # The direct layout starts once an item passes this many frames (or a second
        # item starts); until then the frames are buffered as in the other layout.
        self._buffered_frames = min(BUFFERED_FRAMES, self._window_frames)
        self._windowed = False
        self._clip_index = clip_index
        self._cancel = cancel
        self._samples = GrowingArray(np.float32)
        self._items: list[_Item] = []
        # The direct layout's features: windows [0, capacity), of which the items'
        # frames fill what they have computed.
        self._windows = np.empty((0, n_mels, self._window_frames), dtype=np.float32)
        self._no_windows = self._windows
        #: Frames of the pushes' blocks re-clamped by the last finish (0 when none
        #: needed it).
        self.reclamped_frames = 0
        #: Frames re-clamped by the pushes (when the running floor rose).
        self.settled_frames = 0
        #: Padding frames the pushes filled (:meth:`_prefill`), and those the last
        #: finish filled.
        self.prefilled_frames = 0
        self.padded_frames = 0
        self._finished = False

    @property
    def samples(self) -> int:
        """Samples received so far."""
        return len(self._samples)

    @property
    def waveform(self) -> npt.NDArray[np.float32]:
        """The samples received (and appended by :meth:`finish`), a read-only view."""
        view: npt.NDArray[np.float32] = self._samples.view()
        return view

    @property
    def nbytes(self) -> int:
        """Bytes held: the waveform buffer's capacity and the streamed frames'."""
        frames = sum(int(item.columns.nbytes) for item in self._items)
        return self._samples.nbytes + int(self._windows.nbytes) + frames

    def _item_limit(self) -> int | None:
        """Frames an item may hold: a window's for ``"windows"`` and ``"max_length"``
        (more is never planned), none otherwise."""
        if self._padding in ("windows", "max_length"):
            return self._window_frames
        return None

    def _window_capacity_for(self, windows: int) -> int:
        capacity = self._windows.shape[0]
        if windows <= capacity:
            return capacity
        grown = max(windows, 2 * capacity)
        return min(grown, 1) if self._padding == "max_length" else grown

    def planned_nbytes(self, samples: int) -> int:
        """:attr:`nbytes` once ``samples`` samples are held (a bound: every frame they
        give streamed)."""
        total = self._samples.capacity_for(samples) * 4
        frames = max(0, (min(samples, self._chunk) - _PAD) // HOP + 1)
        if self._direct and (
            self._windowed or samples > self._chunk or frames > self._buffered_frames
        ):
            windows = -(-samples // self._chunk)
            if self._padding == "max_length":
                windows = min(windows, 1)
            window_bytes = self._n_mels * self._window_frames * 4
            return total + self._window_capacity_for(windows) * window_bytes
        if self._padding == "windows":
            spans = [min(self._chunk, samples - start) for start in range(0, samples, self._chunk)]
        else:
            spans = [samples]
        limit = self._item_limit()
        for index, known in enumerate(spans):
            frames = max(0, (known - _PAD) // HOP + 1)
            item = self._items[index] if index < len(self._items) else _Item(0, limit)
            total += item.capacity_for(frames) * self._n_mels * 4
        return total

    @property
    def streamed_frames(self) -> int:
        """Frames computed so far (before :meth:`finish`)."""
        return sum(item.done for item in self._items)

    def _item_bounds(self, index: int) -> tuple[int, int]:
        """``(start, known samples)`` of item ``index`` so far."""
        received = len(self._samples)
        if self._padding != "windows":
            return 0, received
        start = index * self._chunk
        return start, max(0, min(self._chunk, received - start))

    def push(self, samples: npt.ArrayLike) -> None:
        """Append mono 16 kHz samples ``[shape=(k,)]`` and compute every interior frame
        of complete blocks now available (and the head frames once they are final).

        :raises RuntimeError: after :meth:`finish`.
        """
        if self._finished:
            raise RuntimeError("WhisperLogMelStream.push() after finish()")
        self._samples.extend(samples)
        self._advance()
        for index, item in enumerate(self._items):
            if item.floor > item.settled:
                self._settle(index, item)
        if self._windowed and self._window_frames > DIRECT_WINDOW_FRAMES:
            self._prefill(len(self._items) - 1, self._items[-1])

    def _prefill(self, index: int, item: _Item) -> None:
        """Fill the columns of item ``index``'s current window from its next frame on
        with the padding constant of its running floor, once that floor has held for
        :data:`PREFILL_STEADY_FRAMES` frames: ``finish`` then writes only the columns
        left, where the final constant is the same (a wide window's padding is most of
        its bytes: 13.8 MB for 30 s in Qwen2.5-Omni's 300 s window). A floor that rises
        after the fill costs one more fill, here or at ``finish``."""
        window = (index if self._padding == "windows" else 0) + item.next // self._window_frames
        if window >= self._windows.shape[0]:
            return
        value = max(_PAD_CONSTANT, item.floor)
        if window != self._pad_window or value != self._pad_value:
            self._pad_window, self._pad_value = window, value
            self._pad_from, self._pad_since = self._window_frames, item.next
        column = item.next % self._window_frames
        if self._pad_from > column and item.next - self._pad_since >= PREFILL_STEADY_FRAMES:
            self._windows[window, :, column : self._pad_from] = value
            self.prefilled_frames += self._pad_from - column
            self._pad_from = column

    def _settle(self, index: int, item: _Item) -> None:
        """Re-clamp with the item's risen running floor the blocks clamped with a lower
        one that hold a value under it, unless they span more than
        :data:`SETTLE_FRAMES` (then ``finish`` does, once the floor is final)."""
        floor = item.floor
        item.sink(floor)
        calm = item.next - item.settled_at
        # (``low_frames`` bounds the stale blocks' frames: checked before any scan.)
        if item.low_frames > max(SETTLE_FRAMES, 4 * calm):
            return
        stale = [position for position in item.low if item.blocks[position][2] < floor]
        if stale:
            if self._windowed:
                base = index if self._padding == "windows" else 0
                rows, window_frames = self._windows[base:], self._window_frames
            else:
                rows, window_frames = item.columns[None], item.columns.shape[1]
            floor_row = np.full(BLOCK_FRAMES, floor)
            for position in stale:
                first, count, _, minimum = item.blocks[position]
                _clamp(rows, window_frames, first, count, floor_row)
                item.blocks[position] = (first, count, floor, minimum)
                self.settled_frames += count
            item.settled_at = item.next
        item.settled = floor

    def _room(self, first: int) -> int:
        """Frames from ``first`` a block may span: up to the window's end where frames
        go straight into the features."""
        if self._direct:
            return self._window_frames - first % self._window_frames
        return BLOCK_FRAMES

    def _destination(self, index: int, item: _Item, first: int, count: int) -> Any:
        """Where frames ``first .. first + count`` of item ``index`` go
        ``[shape=(n_mels, count)]`` (within one window in the direct layout)."""
        if (
            self._direct
            and not self._windowed
            and (index > 0 or first + count > self._buffered_frames)
        ):
            self._to_windows()
        if not self._windowed:
            return item.column_block(first, count)
        window = (index if self._padding == "windows" else 0) + first // self._window_frames
        if window >= self._windows.shape[0]:
            # A new array, not ndarray.resize: that zero-fills the new windows (a pass
            # over 1.5 MB that the frames and the constant overwrite anyway).
            old = self._windows
            shape = (self._window_capacity_for(window + 1), self._n_mels, self._window_frames)
            self._windows = np.empty(shape, dtype=np.float32)
            self._windows[: old.shape[0]] = old
        column = first % self._window_frames
        return self._windows[window, :, column : column + count]

    def _to_windows(self) -> None:
        """Start the direct layout: the items' buffered frames copied into their
        windows (at most :data:`BUFFERED_FRAMES` of one item), the buffers dropped."""
        self._windowed = True
        items = len(self._items) if self._padding == "windows" else 1
        shape = (self._window_capacity_for(items), self._n_mels, self._window_frames)
        self._windows = np.empty(shape, dtype=np.float32)
        for index, item in enumerate(self._items):
            first = 0 if item.head else FIRST_INTERIOR_FRAME
            if item.next > first:
                base = index if self._padding == "windows" else 0
                rows = self._windows[base:]
                _place(rows, self._window_frames, first, item.columns[:, first : item.next])
            item.columns = np.empty((self._n_mels, 0), dtype=np.float32)

    def _compute(self, item: _Item, first: int, parts: list[Any], out: Any) -> None:
        """Frames ``first ..`` of ``item`` from ``parts`` into ``out``, clamped with the
        item's running floor when a value is under it."""
        self._cancel.check(Checkpoint.FEATURE, self._clip_index)
        peak = log_mel_block(parts, out)
        if peak > item.peak:
            item.peak = peak
            item.floor = _scaled_floor(peak)
        floor = item.floor
        count = out.shape[1]
        minimum = np.float32(out.min())
        used = _NO_FLOOR
        if not minimum >= floor:  # NaN too
            np.maximum(out, np.full(count, floor), out=out)  # a row: see _ENERGY_FLOOR_ROW
            used = floor
        item.add_block(first, count, used, minimum)

    def _advance(self) -> None:
        """Compute the complete blocks of interior frames the items' samples allow."""
        received = len(self._samples)
        items = 1 if self._padding != "windows" else max(1, -(-received // self._chunk))
        while len(self._items) < items:
            self._items.append(_Item(self._n_mels, self._item_limit()))
        limit = self._item_limit()
        waveform = self._samples.view()
        for index, item in enumerate(self._items):
            start, known = self._item_bounds(index)
            # Interior while 160t + 200 <= known samples of the item.
            ready = (known - _PAD) // HOP + 1 if known >= _PAD else 0
            if limit is not None:
                ready = min(ready, limit)
            while ready - item.next >= STREAM_BLOCK_FRAMES:
                parts: list[Any] = []
                first = item.next
                # The head frames go with the first interior block (one kernel call):
                # final once the item has interior frames.
                head = not item.head and known >= _HEAD_FINAL_SAMPLES
                if head:
                    clip = waveform[start : start + known]
                    stop = HOP * (FIRST_INTERIOR_FRAME - 1) + _PAD
                    parts.append(framed(padded_segment(clip, known, -_PAD, stop), 0, first))
                    first = 0
                count = min(
                    BLOCK_FRAMES - len(parts) * FIRST_INTERIOR_FRAME,
                    ready - item.next,
                    self._room(item.next),
                )
                parts.append(framed(waveform, start + HOP * item.next - _PAD, count))
                out = self._destination(index, item, first, item.next + count - first)
                self._compute(item, first, parts, out)
                item.head = item.head or head
                item.next += count

    def _features(self, plan: WhisperPlan) -> npt.NDArray[np.float32]:
        """The features array ``[shape=plan.feature_shape]`` holding every streamed
        frame: the direct layout's own windows (grown or cut to the plan's), or a new
        array the items' columns are copied into."""
        if self._windowed:
            features = self._windows
            self._windows = self._no_windows
            if features.shape != plan.feature_shape:
                features.resize(plan.feature_shape, refcheck=False)
            return features
        features = np.empty(plan.feature_shape, dtype=np.float32)
        for index, item in enumerate(plan.items):
            if index >= len(self._items):
                break
            streamed = self._items[index]
            first = 0 if streamed.head else FIRST_INTERIOR_FRAME
            if streamed.next > first:
                block = streamed.columns[:, first : streamed.next]
                rows = features[item.window : item.window + item.windows]
                _place(rows, plan.window_frames, first, block)
        return features

    def finish(
        self, *, extra_zeros: int = 0, padded_samples: int | None = None
    ) -> tuple[WhisperPlan, npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """Complete the clip: the remaining frames, the clamp and the mask.

        :param extra_zeros: zero samples to append first (a resampler's length fix).
        :param padded_samples: ``"longest"`` only, as in :func:`whisper_plan`.
        :returns: the plan of the clip's final length, and read-only features float32
            ``[shape=plan.feature_shape]`` and mask bool ``[shape=(windows, window_frames)]``,
            equal to :func:`~audiogate.dsp.whisper.whisper_log_mel` of the whole clip.
        :raises ValueError: the length is out of the mode's range (as :func:`whisper_plan`).
        :raises RuntimeError: called twice.
        """
        if self._finished:
            raise RuntimeError("WhisperLogMelStream.finish() called twice")
        self._finished = True
        if extra_zeros:
            self._samples.extend(np.zeros(extra_zeros, dtype=np.float32))
        plan = whisper_plan(
            len(self._samples),
            n_mels=self._n_mels,
            padding=self._padding,
            padded_samples=padded_samples,
            chunk_samples=self._chunk,
        )
        if self._direct and plan.window_frames != self._window_frames:
            raise RuntimeError(f"planned windows of {plan.window_frames} frames")
        waveform = self._samples.view()
        features = self._features(plan)
        self.reclamped_frames = self.padded_frames = 0
        # The prefilled columns of a window are the features' (the direct layout's).
        prefilled = (self._pad_window, self._pad_from, self._pad_value) if self._windowed else None
        for index, item in enumerate(plan.items):
            streamed = self._items[index] if index < len(self._items) else _Item(self._n_mels, None)
            clip = waveform[item.start : item.start + item.samples]
            rows = features[item.window : item.window + item.windows]
            filled = None
            if prefilled is not None and item.window <= prefilled[0] < item.window + item.windows:
                filled = (prefilled[0] - item.window, prefilled[1], prefilled[2])
            self._finish_item(
                clip, item.padded, item.computed, streamed, rows, plan.window_frames, filled
            )
        self._items.clear()
        return plan, readonly(features), _plan_mask(plan)

    def _finish_item(
        self,
        clip: npt.NDArray[np.float32],
        padded: int,
        computed: int,
        streamed: _Item,
        rows: npt.NDArray[np.float32],
        window_frames: int,
        filled: tuple[int, int, np.float32] | None = None,
    ) -> None:
        """``filled``: ``(row, first column, value)``: that row's columns from the first
        hold ``value`` (:meth:`_prefill`)."""
        lo, hi = interior_frames(clip.shape[0], computed)
        # The pushes streamed the interior frames [FIRST_INTERIOR_FRAME, next), next <=
        # hi, and the head with the first of them.
        if (
            (hi > lo and not FIRST_INTERIOR_FRAME <= streamed.next <= hi)
            or (hi == lo and streamed.next > FIRST_INTERIOR_FRAME)
            or (streamed.head and lo != FIRST_INTERIOR_FRAME)
        ):
            raise RuntimeError(
                f"streamed frames up to {streamed.next}, the plan's interior is {lo}..{hi}"
            )
        # What finish computes, straight into the features, in as few kernel calls as
        # the blocks allow: the head (a short clip's), the interior frames the pushes
        # left (under a block), and the tail (the clip's end is known now).
        sources: list[tuple[int, int, Any]] = []
        if lo and not streamed.head:
            head = padded_segment(clip, padded, -_PAD, HOP * (lo - 1) + _PAD)
            sources.append((0, lo, framed(head, 0, lo)))
        begin = max(lo, streamed.next)
        # The interior frames left (under a block) go with the tail in its short copy:
        # one source, one window product.
        joined = computed > hi and hi - begin <= STREAM_BLOCK_FRAMES
        if hi > begin and not joined:
            sources.append((begin, hi, framed(clip, HOP * begin - _PAD, hi - begin)))
        if computed > hi:
            first = begin if joined else hi
            tail = _end_segment(clip, padded, HOP * first - _PAD, HOP * (computed - 1) + _PAD)
            sources.append((first, computed, framed(tail, 0, computed - first)))
        made: list[int] = []  # the blocks made here (positions)
        start = sources[0][0] if sources else computed
        while start < computed:
            row, column = divmod(start, window_frames)
            stop = min(start + BLOCK_FRAMES, computed, start - column + window_frames)
            parts = [
                frames[max(start, first) - first : min(stop, end) - first]
                for first, end, frames in sources
                if max(start, first) < min(stop, end)
            ]
            out = rows[row, :, column : column + stop - start]
            self._cancel.check(Checkpoint.FEATURE, self._clip_index)
            peak = log_mel_block(parts, out)
            streamed.peak = max(streamed.peak, peak)
            # Clamped below with the final floor, with every block that needs it.
            made.append(len(streamed.blocks))
            streamed.blocks.append((start, stop - start, _NO_FLOOR, np.float32(out.min())))
            start = stop
        peak = streamed.peak
        if computed < rows.shape[0] * window_frames:
            peak = max(peak, LOG_FLOOR)
        # The global step, as the whole-clip kernel applies it (scaled domain): only the
        # blocks with a value under the final floor that were clamped with a lower one
        # (those the pushes left, and those made here).
        floor = _scaled_floor(peak)
        constant = max(_PAD_CONSTANT, floor)
        floor_row: npt.NDArray[np.float32] | None = None
        # The pushes' blocks that may hold a value under the final floor: none where it
        # is the floor they settled (every push ends settled, or with its floor under
        # the item's), else ``low`` and those under it in ``above``.
        pushed: list[int] = []
        first_made = made[0] if made else len(streamed.blocks)
        if floor != streamed.settled:
            streamed.sink(floor)
            pushed = streamed.low
        for position in (*pushed, *made):
            first, count, used, minimum = streamed.blocks[position]
            if used < floor and not minimum >= floor:
                if floor_row is None:
                    floor_row = np.full(min(window_frames, BLOCK_FRAMES), floor)
                _clamp(rows, window_frames, first, count, floor_row)
                if position < first_made:  # (not one made here)
                    self.reclamped_frames += count
        for row in range(rows.shape[0]):
            head_frames = min(window_frames, max(0, computed - row * window_frames))
            stop = window_frames
            if filled is not None and filled[0] == row and filled[2] == constant:
                stop = max(head_frames, filled[1])
            if head_frames < stop:
                rows[row, :, head_frames:stop] = constant
                self.padded_frames += stop - head_frames


def _plan_mask(plan: WhisperPlan) -> npt.NDArray[np.bool_]:
    """The plan's frame mask ``[shape=(windows, window_frames)]``, read-only, as
    :func:`~audiogate.dsp.whisper.whisper_log_mel` makes it."""
    spans = tuple(
        (item.window, item.windows, min(item.padded // HOP, -(-item.samples // HOP)))
        for item in plan.items
    )
    return _mask(plan.windows, plan.window_frames, spans)


@functools.lru_cache(maxsize=16)
def _mask(
    windows: int, window_frames: int, spans: tuple[tuple[int, int, int], ...]
) -> npt.NDArray[np.bool_]:
    """A read-only mask, shared by the streams of one geometry (its fill is a few cold
    NumPy calls in ``finish()``): ``ones`` leading frames of each item's
    ``(window, windows, ones)``."""
    mask = np.zeros((windows, window_frames), dtype=np.bool_)
    for window, count, ones in spans:
        mask[window : window + count].reshape(-1)[:ones] = True
    return readonly(mask)


def _end_segment(
    clip: npt.NDArray[np.float32], padded: int, start: int, stop: int
) -> npt.NDArray[np.float32]:
    """:func:`~audiogate.dsp.whisper.padded_segment` for ``start >= 0`` (the tail
    frames'), by slices: the clip's samples, zeros up to ``padded``, and the reflection
    of samples ``padded - 2``.. behind ``padded``."""
    reflected = 2 * (padded - 1) - (stop - 1)  # the smallest reflected index
    if start < 0 or start > padded or clip.shape[0] > padded or reflected < 0:
        return padded_segment(clip, padded, start, stop)
    out = np.zeros(stop - start, dtype=np.float32)
    inside = min(stop, padded, clip.shape[0])
    if inside > start:
        out[: inside - start] = clip[start:inside]
    if stop > padded:
        # Padded index i >= padded reads 2 * (padded - 1) - i: [reflected, padded - 1),
        # backwards; the clip's samples there, zeros past its end.
        mirror = np.zeros(padded - 1 - reflected, dtype=np.float32)
        known = min(padded - 1, clip.shape[0])
        if known > reflected:
            mirror[: known - reflected] = clip[reflected:known]
        out[padded - start :] = mirror[::-1]
    return out


def _clamp(
    rows: npt.NDArray[np.float32],
    window_frames: int,
    first: int,
    count: int,
    floor_row: npt.NDArray[np.float32],
) -> None:
    """``max(x, floor)`` in place for frames ``[first, first + count)`` of an item's
    windows ``rows`` ``[shape=(windows, n_mels, window_frames)]`` (``floor_row``
    ``[shape=(width,)]``, any width)."""
    stop = first + count
    while first < stop:
        row, column = divmod(first, window_frames)
        take = min(stop - first, window_frames - column, floor_row.shape[0])
        part = rows[row, :, column : column + take]
        np.maximum(part, floor_row[:take], out=part)
        first += take


def _place(
    rows: npt.NDArray[np.float32],
    window_frames: int,
    first: int,
    block: npt.NDArray[np.float32],
) -> None:
    """Copy ``block`` ``[shape=(n_mels, count)]``, frames ``[first, first + count)`` of
    an item, into its windows ``rows`` ``[shape=(windows, n_mels, window_frames)]``."""
    done = 0
    count = block.shape[1]
    while done < count:
        row, column = divmod(first + done, window_frames)
        take = min(count - done, window_frames - column)
        np.copyto(rows[row, :, column : column + take], block[:, done : done + take])
        done += take


class WhisperFeatureStream:
    """A Whisper family's :class:`~audiogate.streaming.stage.FeatureStream`: the source
    resampled as one stream (:class:`~audiogate.streaming.stage.SourceResampler`) into
    :class:`WhisperLogMelStream`. Build one with :func:`open_whisper_feature_stream`.

    :param resampler: the clip's streaming resampler (to 16 kHz).
    :param n_mels: mel bins.
    :param padding: the :func:`~audiogate.dsp.whisper.whisper_plan` mode.
    :param chunk_samples: the plan's window.
    :param single_window: the features are the one window ``[0]`` (2-D).
    :param mask: the family keeps the frame mask.
    """

    def __init__(
        self,
        resampler: SourceResampler,
        *,
        n_mels: int,
        padding: Padding,
        chunk_samples: int,
        single_window: bool,
        mask: bool,
        clip_index: int,
        cancel: CancelToken,
    ) -> None:
        self._resampler: SourceResampler | None = resampler
        self._n_mels = n_mels
        self._single_window = single_window
        self._mask = mask
        self._mel: WhisperLogMelStream | None = WhisperLogMelStream(
            n_mels=n_mels,
            padding=padding,
            chunk_samples=chunk_samples,
            clip_index=clip_index,
            cancel=cancel,
        )

    def _parts(self) -> tuple[SourceResampler, WhisperLogMelStream]:
        if self._resampler is None or self._mel is None:
            raise RuntimeError("the Whisper feature stream is closed")
        return self._resampler, self._mel

    @property
    def nbytes(self) -> int:
        """The 16 kHz waveform's buffer, the streamed frames and the waiting source."""
        if self._resampler is None or self._mel is None:
            return 0
        return self._mel.nbytes + self._resampler.waiting_frames * 4

    def planned_nbytes(self, more_frames: int) -> int:
        """:attr:`nbytes` after ``more_frames`` more source frames: the waveform's and the
        frames' buffers once every output sample they give is in
        (:meth:`WhisperLogMelStream.planned_nbytes`), and the source frames that may wait
        for the resampler."""
        resampler, mel = self._parts()
        out = resampler.output_bound(resampler.source_frames + more_frames)
        waiting = (resampler.waiting_frames + more_frames) * 4
        return mel.planned_nbytes(max(out, mel.samples)) + waiting

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Resample and frame the next source samples ``[shape=(k,)]``."""
        resampler, mel = self._parts()
        out = resampler.push(samples)
        if out is not None:
            mel.push(out)

    def finish(self, clip_plan: ClipPlan) -> tuple[npt.NDArray[np.float32], ClipFeatures]:
        """The 16 kHz waveform and the features of the whole clip as ``clip_plan`` plans.

        :raises PluginError: the plan is not what the stream ran, or the frontend made
            another shape than planned.
        """
        resampler, mel = self._parts()
        resample, plan = clip_plan.resample, clip_plan.features
        if (
            not resampler.matches(resample)
            or clip_plan.normalized_samples != resample.output_samples
            or resample.source_samples != resampler.source_frames
        ):
            raise PluginError(
                f"the whole clip is planned as {resample.algorithm} {resample.source_rate_hz}"
                f" -> {resample.output_rate_hz} Hz over {resample.source_samples} frames "
                f"({clip_plan.normalized_samples} of {resample.output_samples} samples), "
                f"streamed over {resampler.source_frames} frames"
            )
        rest = resampler.finish()
        if rest.shape[0]:
            mel.push(rest)
        extra = resample.output_samples - mel.samples
        # Only "soxr_hq" pads soxr's output with zeros to librosa's length; any other
        # shortfall is a plan the stream did not run.
        if extra < 0 or (extra > 0 and resample.algorithm != "soxr_hq"):
            raise PluginError(
                f"the resampler streamed {mel.samples} samples, planned {resample.output_samples}"
            )
        whisper, features, frame_mask = mel.finish(extra_zeros=extra)
        if whisper.samples != resample.output_samples:
            raise PluginError(
                f"the Whisper frontend framed {whisper.samples} samples, planned "
                f"{resample.output_samples}"
            )
        if self._single_window:
            features, frame_mask = features[0], frame_mask[0]
        result = ClipFeatures(
            features=features,
            mask=frame_mask if self._mask else None,
            frames=plan.frames,
            tokens=plan.tokens,
        )
        return mel.waveform, result

    def close(self) -> None:
        """Drop the resampler, the waveform and the frames."""
        if self._resampler is not None:
            self._resampler.close()
        self._resampler = self._mel = None


def open_whisper_feature_stream(
    policy: AudioPolicy,
    *,
    resample: ResamplePlan,
    n_mels: int,
    padding: Padding,
    chunk_samples: int = CHUNK_SAMPLES,
    single_window: bool = False,
    mask: bool = True,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> WhisperFeatureStream | None:
    """The streaming stage of a family whose features are
    :func:`~audiogate.dsp.whisper.whisper_log_mel`'s windows, unchanged (a few lines in
    the family's ``streaming.open_feature_stream``).

    :param policy: the request's policy: ``None`` for another backend than numpy.
    :param resample: the probed plan: ``None`` where it does not stream (not the
        identity or soxr HQ) or its output is not 16 kHz.
    :param n_mels: mel bins; ``padding``, ``chunk_samples``: the plan's mode and window.
    :param single_window: the family's features are the one window ``[0]`` (2-D).
    :param mask: the family keeps the frame mask (``False``: ``mask=None``).
    """
    if policy.feature_backend != "numpy" or resample.output_rate_hz != SAMPLE_RATE_HZ:
        return None
    resampler = open_source_resampler(resample)
    if resampler is None:
        return None
    return WhisperFeatureStream(
        resampler,
        n_mels=n_mels,
        padding=padding,
        chunk_samples=chunk_samples,
        single_window=single_window,
        mask=mask,
        clip_index=clip_index,
        cancel=cancel,
    )
