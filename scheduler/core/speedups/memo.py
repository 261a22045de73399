"""One memo per cycle: every cache and every shortcut of the engine goes through it.

A cycle plans under a :class:`Memo` (see :func:`scheduler.core.planning.cycle.plan_cycle`'s ``speedups``). Enabled,
the caches remember and the shortcuts skip work whose answer is known; disabled, every cache forgets at once
and every shortcut is off, so each question is answered afresh by the plain rules. Plans are the same either
way — ``tests/scheduler/core/speedups/test_speedups.py`` compares them, and
``tests/scheduler/core/speedups/test_speedups_registry.py`` fails when a cache is made outside this module.

- Per-cycle caches are tables from :meth:`Memo.table`, made when their owner is built: the cycle hands its
  memo to the engine objects it builds beneath the speed-ups (:class:`~scheduler.core.model.tables.Tables`: the
  cluster state, its capacity index, fair share, the ETA estimator), so no floor beneath them imports it.
- Shortcuts ask :attr:`Memo.enabled`; the speed-ups that wrap a rule are chosen by it (:mod:`.switch`).
- Static facts (the catalog's, and answers computed from a job's request and the catalog alone, such as
  right-sizing and the memory estimate) are cached for the process with ``functools`` where they are stated:
  no cycle changes them, so no switch turns them off.

The current memo is a context variable set by the cycle (:meth:`Memo.current`); outside a cycle (a test
building one speed-up alone) it is an enabled memo.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from scheduler.core.model.tables import Forgetful


class Memo:
    """The speed-ups of one cycle: on (``enabled``) or all off. It is the cycle's
    :class:`~scheduler.core.model.tables.Tables`: the engine objects the cycle builds take their cache tables from
    it."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled

    def table(self) -> dict[Any, Any]:
        """A new cache table for one owner (a dict, or one that forgets everything when disabled)."""
        return {} if self.enabled else Forgetful()

    @contextmanager
    def current(self) -> Iterator[Memo]:
        """Make this the memo engine objects built inside the ``with`` block use."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


_CURRENT: ContextVar[Memo | None] = ContextVar("scheduler.core.memo", default=None)
_OUTSIDE = Memo()  # what objects built outside a cycle use


def current_memo() -> Memo:
    """The memo of the cycle being planned (an enabled one outside a cycle)."""
    memo = _CURRENT.get()
    return _OUTSIDE if memo is None else memo
