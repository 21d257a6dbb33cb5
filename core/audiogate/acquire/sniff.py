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
from audiogate.decode.geometry import CONTAINER_LABELS, SourceFormat, sniff_container

__all__ = ["UNKNOWN", "WAVE", "check_declared_format", "sniff"]

#: The label of RIFF/WAVE bytes.
WAVE: Final = "RIFF/WAVE"
#: The label of bytes without a recognised signature.
UNKNOWN: Final = "no container signature"

# (offset, magic, label); four bytes or more, so raw samples do not match by chance.
_SIGNATURES: Final = (
    (0, b"RIFX", "RIFX (big-endian RIFF)"),
    (0, b"RF64", "RF64"),
    (0, b"BW64", "BW64"),
    (0, b"fLaC", "FLAC"),
    (0, b"OggS", "Ogg"),
    (0, b"FORM", "AIFF/IFF"),
    (0, b"\x1aE\xdf\xa3", "Matroska/WebM"),
    (4, b"ftyp", "MP4/M4A"),
    (0, b"ID3\x02", "MP3 (ID3)"),
    (0, b"ID3\x03", "MP3 (ID3)"),
    (0, b"ID3\x04", "MP3 (ID3)"),
    (0, b"#!AMR", "AMR"),
    (0, b".snd", "Sun AU"),
)


def sniff(data: bytes) -> str:
    """A short label of the container ``data`` starts with (:data:`UNKNOWN` if none)."""
    if data[:4] in (b"RIFF", b"RF64", b"BW64"):
        return WAVE if data[8:12] == b"WAVE" else f"{data[:4].decode()} (not WAVE)"
    container = sniff_container(memoryview(data))
    if container is not None:
        return CONTAINER_LABELS[container]
    for offset, magic, label in _SIGNATURES:
        if data[offset : offset + len(magic)] == magic:
            return label
    return UNKNOWN


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
