"""Band-limited rational resampling with python-soxr at HQ quality.

This is what ``librosa.load(sr=...)`` and transformers' ``load_audio`` use, so a family
whose reference pipeline loads audio that way (Qwen2-Audio, Phi-4 MM native) gets the
same samples.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import soxr

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.records import readonly

__all__ = ["SOXR_QUALITY", "SOXR_WORKING_BYTES", "soxr_output_length", "soxr_resample"]

SOXR_QUALITY: Final = "HQ"
#: soxr's filter tables and state for one mono stream stay well under this.
SOXR_WORKING_BYTES: Final = 1 << 20


def soxr_output_length(samples: int, *, in_rate_hz: int, out_rate_hz: int) -> int:
    """Output length of a whole-buffer soxr resample: ``round(n·out/in)``, halves up."""
    if samples < 0 or in_rate_hz <= 0 or out_rate_hz <= 0:
        raise ValueError(
            f"samples must be >= 0 and rates > 0; got {samples}, {in_rate_hz}, {out_rate_hz}"
        )
    return (2 * samples * out_rate_hz + in_rate_hz) // (2 * in_rate_hz)


def soxr_resample(
    samples: npt.NDArray[np.float32],
    *,
    in_rate_hz: int,
    out_rate_hz: int,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> npt.NDArray[np.float32]:
    """Resample mono float32 ``[shape=(n,)]`` from ``in_rate_hz`` to ``out_rate_hz``.

    :returns: read-only float32 ``[shape=(soxr_output_length(n),)]``.
    """
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if in_rate_hz == out_rate_hz:
        return readonly(np.array(samples, dtype=np.float32, copy=True))
    out = soxr.resample(
        np.ascontiguousarray(samples, dtype=np.float32), in_rate_hz, out_rate_hz, SOXR_QUALITY
    )
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    return readonly(np.ascontiguousarray(out, dtype=np.float32))
