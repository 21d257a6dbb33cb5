"""Values derived from a policy, computed once per policy object.

A policy is immutable, so what the pipeline derives from it (the decoder's limits, the
feature cache's fingerprint) is the same on every request; a server admits every
request under one policy object. Policies are not hashable (their ``options`` are a
read-only mapping), so the memo is by identity, and an entry goes with its policy.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

from audiogate.policy.model import AudioPolicy

__all__ = ["per_policy"]

_T = TypeVar("_T")


def per_policy(function: Callable[[AudioPolicy], _T]) -> Callable[[AudioPolicy], _T]:
    """``function(policy)``, computed once per policy object (kept while it lives).

    ``function`` must depend on the policy's fields alone.
    """
    memo: dict[int, tuple[weakref.ref[AudioPolicy], _T]] = {}

    def forget(key: int, _ref: weakref.ref[AudioPolicy]) -> None:
        memo.pop(key, None)

    @functools.wraps(function)
    def cached(policy: AudioPolicy) -> _T:
        key = id(policy)
        found = memo.get(key)
        if found is not None and found[0]() is policy:
            return found[1]
        value = function(policy)
        memo[key] = (weakref.ref(policy, functools.partial(forget, key)), value)
        return value

    return cached
