"""What acquisition may do: ceilings, the URL switches and the media root.

:class:`AcquisitionPolicy` is built once by whoever embeds audiogate (a server, the CLI)
and narrowed per request with :meth:`AcquisitionPolicy.narrowed` once the model family is
known. Absolute ceilings (mlxcel's ``DEFAULT_MAX_AUDIO_INPUTS`` and
``ABSOLUTE_MAX_AUDIO_PAYLOAD_SIZE``, ``src/server/media.rs``) can be lowered, never raised.

The private-address escape hatch :data:`PRIVATE_MEDIA_URLS_ENV` is read **once**, when
this module is imported, into :data:`ALLOW_PRIVATE_MEDIA_URLS`; that constant is only the
default of :attr:`AcquisitionPolicy.allow_private_addresses`. Changing the environment
afterwards changes nothing, so a request can never flip it; tests set the field instead.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Sequence
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any, Final, TypeAlias

import attrs

from audiogate.acquire.held import AcquiredBytes
from audiogate.policy import AudioPolicy

__all__ = [
    "ABSOLUTE_MAX_BYTES",
    "ABSOLUTE_MAX_CLIPS",
    "ABSOLUTE_MAX_REDIRECTS",
    "ALLOW_PRIVATE_MEDIA_URLS",
    "PRIVATE_MEDIA_URLS_ENV",
    "AcquisitionPolicy",
    "IPAddress",
    "Resolver",
    "env_flag",
    "normalize_host_pattern",
]

IPAddress: TypeAlias = IPv4Address | IPv6Address

#: Resolves ``(host, port)`` to the addresses a connection may use. The default is
#: :func:`audiogate.acquire.net.system_resolver` (``getaddrinfo`` in the loop's executor).
#: Strings are accepted and parsed as addresses.
Resolver: TypeAlias = Callable[[str, int], Awaitable[Sequence[IPAddress | str]]]

#: Most clips one request may carry (mlxcel ``DEFAULT_MAX_AUDIO_INPUTS``).
ABSOLUTE_MAX_CLIPS: Final = 16
#: Most encoded bytes per clip and per request (mlxcel ``ABSOLUTE_MAX_AUDIO_PAYLOAD_SIZE``).
ABSOLUTE_MAX_BYTES: Final = 500 * 1024 * 1024
#: Most redirects one URL may follow (mlxcel ``http_image_client``).
ABSOLUTE_MAX_REDIRECTS: Final = 5

#: The environment variable that admits private addresses for media URLs.
PRIVATE_MEDIA_URLS_ENV: Final = "AUDIOGATE_ALLOW_PRIVATE_MEDIA_URLS"

_TRUE_WORDS: Final = frozenset({"1", "true", "on", "yes"})


def env_flag(value: str | None) -> bool:
    """Whether an environment value switches a flag on: ``1``/``true``/``on``/``yes``.

    Trimmed and case-insensitive; anything else (unset, empty, ``0``, a typo) is off, so a
    mistake fails closed.
    """
    return value is not None and value.strip().lower() in _TRUE_WORDS


#: :data:`PRIVATE_MEDIA_URLS_ENV` as read at import (start-up); the default of
#: :attr:`AcquisitionPolicy.allow_private_addresses`.
ALLOW_PRIVATE_MEDIA_URLS: Final[bool] = env_flag(os.environ.get(PRIVATE_MEDIA_URLS_ENV))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bounded(ceiling: int, minimum: int = 1) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not _is_int(value) or not minimum <= value <= ceiling:
            raise ValueError(
                f"AcquisitionPolicy.{attribute.name} must be an int in "
                f"[{minimum}, {ceiling}], not {value!r}"
            )

    return check


def _seconds(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"AcquisitionPolicy.{attribute.name} must be a finite number of seconds > 0, "
            f"not {value!r}"
        )


def _flag(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"AcquisitionPolicy.{attribute.name} must be a bool, not {value!r}")


_LABEL_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def normalize_host_pattern(pattern: str) -> str:
    """Lowercase an allow-list entry and drop one trailing dot; refuse malformed ones.

    An entry is an exact host (``media.example.com``, an IP literal such as ``2001:db8::1``
    without brackets) or ``*.suffix``, which matches any host *below* ``suffix`` but not
    ``suffix`` itself. Entries are ASCII (write internationalized names in punycode).

    :raises ValueError: the entry is empty, non-ASCII, or has a misplaced ``*``.
    """
    if not isinstance(pattern, str) or not pattern.isascii():
        raise ValueError(f"allowed host {pattern!r} must be an ASCII string (use punycode)")
    text = pattern.strip().lower()
    if text.endswith("."):
        text = text[:-1]
    wildcard = text.startswith("*.")
    name = text[2:] if wildcard else text
    if ":" in name and not wildcard:
        try:  # an IPv6 literal, compared with the URL's host in compressed form
            return IPv6Address(name.strip("[]")).compressed
        except ValueError:
            raise ValueError(f"allowed host {pattern!r} is not a valid IPv6 literal") from None
    labels = name.split(".")
    if not name or any(not label or not set(label) <= _LABEL_CHARS for label in labels):
        raise ValueError(
            f"allowed host {pattern!r} must be a host name, an IP literal or '*.suffix'"
        )
    return text


def _hosts(value: Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise ValueError("AcquisitionPolicy.allowed_hosts must be a sequence of hosts, not a str")
    return tuple(dict.fromkeys(normalize_host_pattern(p) for p in value))


def _root(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


def _absolute(_instance: Any, _attribute: attrs.Attribute[Any], value: Path | None) -> None:
    if value is not None and not value.is_absolute():
        raise ValueError(f"AcquisitionPolicy.media_root must be an absolute path, not {value}")


@attrs.frozen(kw_only=True)
class AcquisitionPolicy:
    """What acquisition may read, from where, and how much.

    :param max_clips: most audio parts per request (≤ 16).
    :param max_bytes_per_clip: most encoded bytes of one clip (≤ 500 MiB).
    :param max_bytes_per_request: most encoded bytes of all clips together (≤ 500 MiB);
        each source is read against what is left of it.
    :param allow_url_fetch: fetch ``http(s)://`` sources at all. Off by default in the
        library: the embedding server switches it on explicitly.
    :param allow_private_addresses: admit non-public addresses (loopback, private,
        link-local, ...). Defaults to :data:`ALLOW_PRIVATE_MEDIA_URLS`, read once at start-up.
    :param allowed_hosts: if set, the only hosts a URL (and every redirect hop) may name:
        exact hosts or ``*.suffix`` patterns. ``()`` admits no host; ``None`` has no list.
        The address check still applies to allowed hosts.
    :param https_only: refuse ``http://`` on every hop (so a redirect cannot downgrade).
    :param media_root: the directory ``file://`` URLs and bare paths are confined to;
        ``None`` refuses them. The CLI's own paths (:func:`acquire_paths`) do not need it.
    :param max_redirects: most redirects one URL may follow (≤ 5).
    :param total_timeout_s: wall-clock limit of one URL fetch, all hops and the body.
    :param connect_timeout_s: limit of one TCP (and TLS) connect.
    :param resolver: host name resolver (tests inject one); ``None``: the system's.
    :param shared_bytes: the bytes all requests' file and URL reads may hold at once
        (:class:`~audiogate.acquire.held.AcquiredBytes`, one per server); ``None``: no
        bound beyond each request's own. The reference server sets one.
    :raises ValueError: a field is out of range or above its absolute ceiling.
    """

    max_clips: int = attrs.field(default=ABSOLUTE_MAX_CLIPS, validator=_bounded(ABSOLUTE_MAX_CLIPS))
    max_bytes_per_clip: int = attrs.field(
        default=ABSOLUTE_MAX_BYTES, validator=_bounded(ABSOLUTE_MAX_BYTES)
    )
    max_bytes_per_request: int = attrs.field(
        default=ABSOLUTE_MAX_BYTES, validator=_bounded(ABSOLUTE_MAX_BYTES)
    )
    allow_url_fetch: bool = attrs.field(default=False, validator=_flag)
    allow_private_addresses: bool = attrs.field(default=ALLOW_PRIVATE_MEDIA_URLS, validator=_flag)
    allowed_hosts: tuple[str, ...] | None = attrs.field(default=None, converter=_hosts)
    https_only: bool = attrs.field(default=False, validator=_flag)
    media_root: Path | None = attrs.field(default=None, converter=_root, validator=_absolute)
    max_redirects: int = attrs.field(
        default=ABSOLUTE_MAX_REDIRECTS, validator=_bounded(ABSOLUTE_MAX_REDIRECTS, minimum=0)
    )
    total_timeout_s: float = attrs.field(default=10.0, validator=_seconds)
    connect_timeout_s: float = attrs.field(default=5.0, validator=_seconds)
    resolver: Resolver | None = attrs.field(default=None, eq=False, repr=False)
    shared_bytes: AcquiredBytes | None = attrs.field(default=None, eq=False, repr=False)

    def narrowed(self, policy: AudioPolicy) -> AcquisitionPolicy:
        """This policy with the family's stricter clip count and encoded-byte caps.

        :param policy: the loaded model's audio policy (``max_clips``,
            ``max_encoded_bytes_per_clip``, ``max_encoded_bytes_per_request``).
        """
        return attrs.evolve(
            self,
            max_clips=min(self.max_clips, policy.max_clips),
            max_bytes_per_clip=min(self.max_bytes_per_clip, policy.max_encoded_bytes_per_clip),
            max_bytes_per_request=min(
                self.max_bytes_per_request, policy.max_encoded_bytes_per_request
            ),
        )
