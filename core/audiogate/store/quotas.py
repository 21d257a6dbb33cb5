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
    blob_shared: bool,
) -> None:
    """Refuse a new record of ``nbytes`` bytes where a quota would be exceeded.

    :param owner_bytes: the owner's live sources' bytes.
    :param owner_count: the owner's live sources.
    :param total_bytes: every live blob's bytes, each counted once (``None``: not
        counted, where ``quotas`` has no total).
    :param blob_shared: whether a live record already names the blob (it then adds no
        bytes to the total).
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
        grown = total_bytes + (0 if blob_shared else nbytes)
        if grown > quotas.max_total_bytes:
            raise SourceQuotaError(
                "source store bytes", actual=grown, maximum=quotas.max_total_bytes
            )
