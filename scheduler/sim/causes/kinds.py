"""The kinds a pending job's wait is labelled with: the engine's ``Waiting.blocker`` as it gives it, plus a
few the simulator adds, in parentheses, for pending time no plan explained.

The engine's kinds are not a closed list (:class:`~scheduler.core.model.vocabulary.BlockerKind` may grow): an unknown
kind is kept under its own name, listed after the known ones, so that a new engine kind shows up instead of hiding.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.model.vocabulary import BlockerKind

# The ones known today, in display order (not every member: ``reserved`` is listed after them, as unknown ones are).
ENGINE_KINDS = (
    BlockerKind.CAPACITY,
    BlockerKind.QUOTA,
    BlockerKind.RECONFIGURING,
    BlockerKind.HELD,
    BlockerKind.NOT_READY,
)

# Pending time that no cycle's Waiting explained:
BETWEEN_CYCLES = "(between cycles)"  # submitted or evicted (node lost) since the last cycle: no plan has seen it yet
EVICTED = "(evicted this cycle)"  # the cycle's plan evicted it; a plan explains only the jobs it was given pending
BIND_DROPPED = "(bind dropped)"  # the plan bound it on a node being reconfigured; the bench's repair dropped the bind
NO_KIND = "(no kind given)"  # a Waiting with an empty blocker (a planner that gives none)
UNEXPLAINED = "(unexplained)"  # pending after the plan, and the plan said nothing about it
SIMULATOR_KINDS = (BETWEEN_CYCLES, EVICTED, BIND_DROPPED, NO_KIND, UNEXPLAINED)


def ordered(kinds: Iterable[str]) -> list[str]:
    """``kinds`` in display order: the engine's known kinds, then unknown engine kinds A–Z, then the simulator's."""
    present = set(kinds)
    known = [kind for kind in ENGINE_KINDS if kind in present]
    added = [kind for kind in SIMULATOR_KINDS if kind in present]
    return known + sorted(present - set(known) - set(added)) + added
