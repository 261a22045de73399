"""Quota arithmetic of fair share: limits in units, the units a placement holds, where a quota is exceeded.

The rules are :mod:`scheduler.core.rules.fairshare`'s (rules 1 and 2); this module holds the pure values and
functions they are written with, so that a reader of a limit or an admission message needs nothing else.
All figures are integer units of 1/7000 GPU (:mod:`scheduler.core.gpus.units`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from scheduler.core.gpus.units import to_units
from scheduler.core.model.cluster_state import ClusterState, gpu_class_of, slot_units
from scheduler.core.model.snapshot import Slot, Team
from scheduler.core.model.vocabulary import PRIORITY_INDEX

Start = TypeVar("Start")
JobId = TypeVar("JobId")

ANY = "any"
Excess = tuple[str, int, int]  # (class or "any", units after, limit)


class Admission:
    """``ok``: the job may hold the units it asked about; ``borrowing``: it would hold them above the guarantee;
    ``reason``: why, for a person. A refusal's reason is written only when read (a cycle refuses tens of
    thousands of placements and shows a person a few thousand reasons): pass a function to defer it."""

    __slots__ = ("_reason", "borrowing", "ok")

    def __init__(self, ok: bool, borrowing: bool, reason: str | Callable[[], str]) -> None:
        self.ok = ok
        self.borrowing = borrowing
        self._reason = reason

    @property
    def reason(self) -> str:
        if not isinstance(self._reason, str):
            self._reason = self._reason()
        return self._reason

    def _key(self) -> tuple[bool, bool, str]:
        return (self.ok, self.borrowing, self.reason)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Admission) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Admission(ok={self.ok!r}, borrowing={self.borrowing!r}, reason={self.reason!r})"


@dataclass(frozen=True, slots=True)
class Limits:
    """A quota in units: overall, per listed class, and for classes not listed (None: unbounded)."""

    overall: int | None
    by_class: Mapping[str, int]
    other_classes: int | None

    def for_class(self, gpu_class: str) -> int | None:
        return self.by_class.get(gpu_class, self.other_classes)


def placement_units(state: ClusterState, slots: tuple[tuple[Slot, ...], ...]) -> dict[str, int]:
    """Units per GPU class that ``slots`` (one tuple per replica) would hold: the ``units_by_class`` of admit."""
    totals: dict[str, int] = {}
    for replica in slots:
        for slot in replica:
            gpu = state.gpus[(slot.node, slot.gpu)]
            gpu_class = gpu_class_of(gpu.node.gpu_model)
            totals[gpu_class] = totals.get(gpu_class, 0) + slot_units(slot, gpu.spec)
    return totals


def guarantee_limits(team: Team | None) -> Limits:
    entries = dict(team.guaranteed) if team else {}
    classes = {c: to_units(g) for c, g in sorted(entries.items()) if c != ANY}
    if ANY in entries:
        return Limits(overall=to_units(entries[ANY]), by_class=classes, other_classes=None)
    return Limits(overall=sum(classes.values()), by_class=classes, other_classes=0)


def burst_limits(team: Team | None, guarantee: Limits) -> Limits:
    entries = dict(team.burst) if team else {}
    classes = {c: to_units(b) for c, b in sorted(entries.items()) if c != ANY}
    for gpu_class, floor in guarantee.by_class.items():
        if gpu_class in classes:
            classes[gpu_class] = max(classes[gpu_class], floor)
    overall = to_units(entries[ANY]) if ANY in entries else None
    if overall is not None:
        overall = max(overall, guarantee.overall or 0)
    return Limits(overall=overall, by_class=classes, other_classes=None)


def fill_fits(
    limits: Limits, held: int, filled: Mapping[str, int], total: int, by_class: Iterable[tuple[str, int]]
) -> bool:
    """The first-fit test of fair-share rule 4: does a job of ``total`` units (``by_class``: its units per class)
    still fit in a guarantee of which ``held`` units overall and ``filled`` per class are taken?"""
    if limits.overall is not None and held + total > limits.overall:
        return False
    for gpu_class, amount in by_class:
        limit = limits.for_class(gpu_class)
        if limit is not None and filled.get(gpu_class, 0) + amount > limit:
            return False
    return True


def fill_order(preemptible: bool, priority: str, started_at: Start, job_id: JobId) -> tuple[int, int, Start, JobId]:
    """The order in which a team's running jobs fill its guarantee (fair-share rule 4): non-preemptible work
    first, then priority, then the earlier start, then id."""
    return (int(preemptible), PRIORITY_INDEX[priority], started_at, job_id)


class GuaranteeFill:
    """Fair-share rule 4: a team's running jobs, taken in :func:`fill_order`, fill its guarantee first-fit; a job
    that no longer fits — overall or in a class it uses — is borrowed. The scheduler fills with the jobs running
    now, billing with the jobs live at a ledger instant, so the two never disagree about what was borrowed.

    ``held`` and ``filled`` (units overall and per class) start where a resumed fill left off."""

    __slots__ = ("filled", "held", "limits")

    def __init__(self, limits: Limits, held: int = 0, filled: dict[str, int] | None = None) -> None:
        self.limits = limits
        self.held = held
        self.filled: dict[str, int] = {} if filled is None else filled

    def offer(self, total: int, by_class: Collection[tuple[str, int]]) -> bool:
        """Count a job of ``total`` units (``by_class``: its units per class) in the guarantee if it still fits;
        False: it does not, and the job is borrowed."""
        if not fill_fits(self.limits, self.held, self.filled, total, by_class):
            return False
        self.held += total
        for gpu_class, amount in by_class:
            self.filled[gpu_class] = self.filled.get(gpu_class, 0) + amount
        return True


def borrowed_in_fill(limits: Limits, jobs: Iterable[tuple[JobId, int, Collection[tuple[str, int]]]]) -> list[JobId]:
    """The jobs a whole :class:`GuaranteeFill` finds borrowed; ``jobs``: (id, units, units per class) in
    :func:`fill_order`."""
    fill = GuaranteeFill(limits)
    return [job_id for job_id, total, by_class in jobs if not fill.offer(total, by_class)]


def exceeds(limits: Limits, usage: Mapping[str, int], units_by_class: Mapping[str, int]) -> Excess | None:
    """The first dimension (overall, then classes by name) where usage + units passes the limit, or None."""
    total = units_by_class[ANY] if ANY in units_by_class else sum(units_by_class.values())
    held = sum(usage.values()) - usage.get(ANY, 0)
    if limits.overall is not None and held + total > limits.overall:
        return (ANY, held + total, limits.overall)
    for gpu_class in units_by_class if len(units_by_class) == 1 else sorted(units_by_class):
        if gpu_class == ANY or not units_by_class[gpu_class]:
            continue
        limit = limits.for_class(gpu_class)
        after = usage.get(gpu_class, 0) + units_by_class[gpu_class]
        if limit is not None and after > limit:
            return (gpu_class, after, limit)
    return None


def of_class(gpu_class: str) -> str:
    """ " of class X" for a message, or nothing for the overall figure."""
    return "" if gpu_class == ANY else f" of class {gpu_class}"
