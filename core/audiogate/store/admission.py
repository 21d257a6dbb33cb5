"""Admitting an uploaded source: the same acquisition, sniffing and header admission as
inline audio, under the policy of the model that serves it.

This module drives stages (acquire, then the preflight that reads the header with
``decode.inspect()``); the rest of :mod:`audiogate.store` imports no stage, so
acquisition can resolve references through the store's protocol without reaching
forward (``tests/meta/test_import_direction.py``).
"""

from __future__ import annotations

import attrs

from audiogate.acquire import AcquisitionPolicy, EncodedClip, acquire_bytes
from audiogate.cancel import NEVER, CancelToken
from audiogate.decode.geometry import AUTO, ClipGeometry, SourceFormat
from audiogate.host import FamilyHost
from audiogate.pipeline.preflight import preflight
from audiogate.policy import AudioPolicy

__all__ = ["AdmittedSource", "admit_source"]


@attrs.frozen(kw_only=True)
class AdmittedSource:
    """An upload that passed admission: the clip (ordinal 1), its declared duration and
    the geometry read from its header."""

    clip: EncodedClip
    duration_us: int
    geometry: ClipGeometry | None = None


def admit_source(
    data: bytes,
    *,
    host: FamilyHost,
    policy: AudioPolicy,
    acquisition: AcquisitionPolicy,
    source_format: SourceFormat = AUTO,
    cancel: CancelToken = NEVER,
) -> AdmittedSource:
    """Admit ``data`` as one clip of a request would be: the acquisition's ceilings, the
    empty check and the format sniff (:func:`~audiogate.acquire.acquire_bytes`), then every
    per-clip budget of ``policy`` from the header alone
    (:func:`~audiogate.pipeline.preflight.preflight`). No sample is decoded.

    :raises AcquisitionError: empty, or not what ``source_format`` declares.
    :raises LimitError: over the acquisition's or the policy's limits.
    :raises DecodeError: a header the policy refuses.
    :raises FeatureError: too short for the family's frontend.
    """
    (clip,) = acquire_bytes([data], policy=acquisition, source_format=source_format, cancel=cancel)
    plan = preflight(host, policy, [clip], cancel=cancel)
    geometry = plan.clips[0].geometry
    return AdmittedSource(clip=clip, duration_us=geometry.duration_us, geometry=geometry)
