"""Which families' frontends stream incrementally, and how their features are shaped.

A family listed here computes its features with :mod:`audiogate.dsp.whisper` and its
features stage wraps :func:`~audiogate.dsp.whisper.whisper_log_mel`'s result without
further arithmetic; :class:`WhisperFamily` says which plan and which wrapping. The
streaming tests check every entry against the family's own ``extract_features`` bit for
bit, so an entry that drifts from its family fails there. (Until a family can declare
this itself: notes-fam/platform-requests.md.) Every other family streams through the
accumulating frontend.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.dsp.whisper_geometry import CHUNK_SAMPLES, Padding
from audiogate.records import ClipFeatures, FeaturePlan

__all__ = ["INCREMENTAL_RESAMPLERS", "WHISPER_FAMILIES", "WhisperFamily"]

#: Resample plans the incremental path reproduces: the identity, and soxr HQ run as one
#: stream (``"soxr_hq"``: padded with zeros to librosa's length; ``"soxr_hq_native"``:
#: soxr's own length), whose output does not depend on how its input is split.
INCREMENTAL_RESAMPLERS: Final = frozenset({"identity", "soxr_hq", "soxr_hq_native"})


@attrs.frozen(kw_only=True)
class WhisperFamily:
    """One family's Whisper frontend: the plan's arguments and the result's shape.

    :param n_mels: mel bins.
    :param padding: the plan's mode.
    :param chunk_samples: the plan's window.
    :param single_window: the family's features are the one window ``[0]`` (2-D).
    :param mask: the family keeps the frame mask.
    """

    n_mels: int
    padding: Padding
    chunk_samples: int = CHUNK_SAMPLES
    single_window: bool = False
    mask: bool = True

    def clip_features(
        self,
        features: npt.NDArray[np.float32],
        mask: npt.NDArray[np.bool_],
        plan: FeaturePlan,
    ) -> ClipFeatures:
        """The family's :class:`ClipFeatures` from the frontend's windows."""
        if self.single_window:
            return ClipFeatures(
                features=features[0],
                mask=mask[0] if self.mask else None,
                frames=plan.frames,
                tokens=plan.tokens,
            )
        return ClipFeatures(
            features=features,
            mask=mask if self.mask else None,
            frames=plan.frames,
            tokens=plan.tokens,
        )


WHISPER_FAMILIES: Final[Mapping[str, WhisperFamily]] = MappingProxyType(
    {
        "qwen2audio": WhisperFamily(n_mels=128, padding="max_length", single_window=True),
        "qwen25omni": WhisperFamily(
            n_mels=128, padding="max_length", chunk_samples=300 * 16_000, single_window=True
        ),
        "qwen3omni": WhisperFamily(n_mels=128, padding="longest", single_window=True),
        "voxtral": WhisperFamily(n_mels=128, padding="multiple", mask=False),
        "audioflamingo3": WhisperFamily(n_mels=128, padding="windows"),
        "glmasr": WhisperFamily(n_mels=128, padding="windows"),
    }
)
