"""Compare the declared format with what the first bytes say.

Only a cheap signature check: the strict decoder validates the whole header later. A
``wav`` declaration needs ``RIFF....WAVE`` (or RF64/BW64); a compressed container's
declaration needs that container's signature (``opus``: Ogg or WebM); ``auto`` takes any;
a raw declaration must not start with the signature of any container (a client that says
``pcm16`` but sends a file would otherwise be decoded as noise).
"""

from __future__ import annotations

from typing import Final

from audiogate.acquire.context import SourceRefused
from audiogate.decode.geometry import CONTAINER_LABELS, SourceFormat, describe_signature

__all__ = ["UNKNOWN", "WAVE", "check_declared_format", "sniff"]

#: The label of RIFF/WAVE bytes.
WAVE: Final = "RIFF/WAVE"
#: The label of bytes without a recognised signature.
UNKNOWN: Final = "no container signature"
_NOTHING: Final = "no known signature"  # describe_signature's word for it


def sniff(data: bytes) -> str:
    """A short label of the container ``data`` starts with (:data:`UNKNOWN` if none)."""
    found = describe_signature(data)
    if found == CONTAINER_LABELS["wav"]:
        return WAVE
    return UNKNOWN if found == _NOTHING else found


def check_declared_format(data: bytes, source_format: SourceFormat) -> None:
    """Refuse ``data`` whose signature contradicts ``source_format``.

    :raises SourceRefused: naming the declared format and what was sniffed.
    """
    found = sniff(data)
    declared = source_format.container
    if declared == "auto":
        return
    if declared != "raw":
        names = ("ogg", "webm") if declared == "opus" else (declared,)
        expected = [CONTAINER_LABELS[name] for name in names]
        if found not in expected:
            raise SourceRefused(
                f"declared format {declared} does not match the bytes: expected "
                f"{' or '.join(expected)}, sniffed {found}"
            )
        return
    if found != UNKNOWN:
        raise SourceRefused(
            f"declared raw {source_format.encoding} does not match the bytes: raw samples "
            f"must not start with a container signature, sniffed {found}"
        )
