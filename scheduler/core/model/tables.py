"""What a rule's owner asks of the cycle's caches, stated below the speed-ups so that rules never open them.

An engine object that keeps answers for the cycle (fair share's quotas and fills, the capacity index's
placements, the reconfigurations' offer lists) is handed a :class:`Tables` when it is built and takes one
table per cache from it. The cycle hands it the speed-ups' memo (:class:`scheduler.core.speedups.memo.Memo`,
which implements this protocol): enabled, the tables remember; disabled, they forget. Built alone — in a test,
or by any caller that names no tables — an object gets :data:`FORGET`, and its every question is answered
afresh by the plain rule.
"""

from __future__ import annotations

from typing import Any, Protocol


class Tables(Protocol):
    """A source of cache tables for one cycle."""

    def table(self) -> dict[Any, Any]:
        """A new, empty cache table for one owner."""
        ...


class Forgetful(dict[Any, Any]):
    """A table that never answers from memory: whatever is stored, a lookup finds nothing, so the caller works
    the answer out again. Reading back with ``table[key]`` what the caller has just stored still works."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def __contains__(self, key: object) -> bool:
        return False

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self[key] = default
        return default


class Forget:
    """Tables that forget everything: the plain rules, with no cache at all."""

    def table(self) -> dict[Any, Any]:
        return Forgetful()


FORGET: Tables = Forget()
