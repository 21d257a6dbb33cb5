"""What a store may hold: the quota check every record backend applies the same way."""

from __future__ import annotations

from audiogate.errors import SourceQuotaError
from audiogate.store.source_record import StoreQuotas

__all__ = ["check_quotas"]


def check_quotas(
    quotas: StoreQuotas,
    nbytes: int,
    *,
    owner_bytes: int,
    owner_count: int,
    total_bytes: int | None,
) -> None:
    """Refuse a new record of ``nbytes`` bytes where a quota would be exceeded.

    :param owner_bytes: the owner's live sources' bytes.
    :param owner_count: the owner's live sources.
    :param total_bytes: every live record's bytes (``None``: not counted, where
        ``quotas`` has no total). A blob two owners hold is charged to each: whether an
        upload fits never depends on what other owners sent (charging shared bytes once
        let someone else's bytes in where fresh ones were refused: an existence oracle).
    :raises SourceQuotaError: the first quota exceeded.
    """
    if quotas.max_sources_per_owner is not None and owner_count + 1 > quotas.max_sources_per_owner:
        raise SourceQuotaError(
            "sources per owner", actual=owner_count + 1, maximum=quotas.max_sources_per_owner
        )
    if quotas.max_bytes_per_owner is not None and owner_bytes + nbytes > quotas.max_bytes_per_owner:
        raise SourceQuotaError(
            "source bytes per owner",
            actual=owner_bytes + nbytes,
            maximum=quotas.max_bytes_per_owner,
        )
    if quotas.max_total_bytes is not None and total_bytes is not None:
        grown = total_bytes + nbytes
        if grown > quotas.max_total_bytes:
            raise SourceQuotaError(
                "source store bytes", actual=grown, maximum=quotas.max_total_bytes
            )
