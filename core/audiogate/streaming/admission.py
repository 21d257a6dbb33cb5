"""Admission of a clip as it arrives: the whole-clip checks on the running length.

A stream's clip is admitted by the same code as a whole clip: the preflight of a
one-clip request (:func:`~audiogate.pipeline.preflight.preflight_one`: the checks of
:func:`~audiogate.pipeline.preflight.preflight` without the request's walk) over the
stream's header (its declared or parsed format) at the number of frames received so far
(no sample is read). Every limit the preflight checks (source duration and frames, the
duration cap in normalized samples, feature frames, the request's samples, frames and
bytes, the waveform working and result bytes, the prepared result bytes) grows with the
length, so a stream's admissible lengths are a prefix: :class:`StreamAdmission` finds its
last frame once (a binary search over the preflight) and then compares one integer per
chunk. The chunk that crosses it is refused by running the preflight at the new length,
so the error is the whole clip's, typed and worded the same.
"""

from __future__ import annotations

import threading
from typing import Final

import attrs

from audiogate.decode.decoder import check_limits
from audiogate.decode.geometry import ClipGeometry
from audiogate.errors import LimitError
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import RequestPlan
from audiogate.pipeline.preflight import decode_limits, preflight_one
from audiogate.policy import MICROS_PER_SECOND, AudioPolicy

__all__ = ["StreamAdmission"]

#: Lengths searched for the first refused one (2**40 frames: 254 days at 48 kHz); a
#: policy admitting more (a truncating one) leaves the stream unbounded by admission,
#: and the stream keeps only what the clip's plan decodes.
_SEARCH_LIMIT: Final = 1 << 40


#: The header's fields :meth:`StreamAdmission.geometry` sets at a length.
_AT_LENGTH: Final = frozenset({"frames", "duration_us", "data_length", "exact"})

#: The last admitted length of recent (host, policy, header) triples: a server's streams
#: share a few formats, and the search runs ~40 preflights (about a millisecond). Keyed
#: by identity (a policy is not hashable), the objects kept to check it; oldest out.
_BOUNDS: dict[tuple[int, int, int, ClipGeometry], tuple[FamilyHost, AudioPolicy, int | None]] = {}
_BOUNDS_MAX: Final = 64
_BOUNDS_LOCK: Final = threading.Lock()


class StreamAdmission:
    """The whole-clip admission of one streamed clip, on its running length.

    :param host: the plugin host.
    :param policy: the loaded model's policy.
    :param header: the clip's header geometry (any ``frames``; ``data_offset`` is the
        header's bytes, ``frame_bytes`` the bytes per frame).
    :param clip_index: zero-based clip index, named in every error.
    :raises DecodeError: the declared rate is not admitted (as a whole clip's header).
    :raises LimitError: the rate or channels are over their caps.
    """

    def __init__(
        self, host: FamilyHost, policy: AudioPolicy, header: ClipGeometry, *, clip_index: int = 0
    ) -> None:
        self._host = host
        self._policy = policy
        self._header = header
        self._clip_index = clip_index
        self._frame_bytes = header.frame_bytes
        # What attrs.evolve copies of the header (every init field), but for the fields
        # :meth:`geometry` sets: one call per plan, not evolve's walk of the fields.
        self._fixed = {
            field.alias: getattr(header, field.name)
            for field in attrs.fields(type(header))
            if field.init and field.alias not in _AT_LENGTH
        }
        empty = self.geometry(0)
        check_limits(empty, decode_limits(policy), clip_index=clip_index)
        key = (id(host), id(policy), clip_index, empty)
        found = _BOUNDS.get(key)
        if found is not None and found[0] is host and found[1] is policy:
            self.max_frames: int | None = found[2]
        else:
            self.max_frames = self._last_admitted()
            with _BOUNDS_LOCK:
                if len(_BOUNDS) >= _BOUNDS_MAX:
                    _BOUNDS.pop(next(iter(_BOUNDS)))
                _BOUNDS[key] = (host, policy, self.max_frames)

    def geometry(self, frames: int) -> ClipGeometry:
        """The header at ``frames`` frames."""
        return type(self._header)(
            **self._fixed,
            frames=frames,
            duration_us=frames * MICROS_PER_SECOND // self._header.rate_hz,
            data_length=frames * self._frame_bytes,
            exact=True,
        )

    def plan(self, frames: int) -> RequestPlan:
        """The whole clip's admission at ``frames`` frames (its plan, or its error):
        :func:`~audiogate.pipeline.preflight.preflight_one` of the header at that length
        (what :func:`~audiogate.pipeline.preflight.preflight` makes of the clip, without
        the request's walk).

        :raises LimitError: a limit is crossed.
        :raises FeatureError: too short for the family.
        :raises EmptyAudioError: no bytes at all.
        """
        return preflight_one(
            self._host,
            self._policy,
            self.geometry(frames),
            nbytes=self._header.data_offset + frames * self._frame_bytes,
        )

    def _refused(self, frames: int) -> bool:
        try:
            self.plan(frames)
        except LimitError:
            return True
        except Exception:  # too short, empty: not a limit a longer stream lifts
            return False
        return False

    def _last_admitted(self) -> int | None:
        high = 1
        while not self._refused(high):
            if high >= _SEARCH_LIMIT:
                return None
            high *= 2
        low = high // 2  # admitted (or 0)
        while high - low > 1:
            middle = (low + high) // 2
            if self._refused(middle):
                high = middle
            else:
                low = middle
        return low

    def admit(self, frames: int) -> None:
        """Check a stream that has received ``frames`` frames.

        :raises LimitError: ``frames`` is past the last admitted length: the whole clip's
            error at this length.
        """
        if self.max_frames is not None and frames > self.max_frames:
            self.plan(frames)
            # Not refused after all (no limit is monotonic in a way the search missed):
            # move the bound rather than refuse what a whole clip would admit.
            self.max_frames = frames
