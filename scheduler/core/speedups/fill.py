"""Resuming fair share's guarantee fill (:meth:`scheduler.core.rules.fairshare.FairShare.borrowed`).

The fill is a left-to-right first-fit scan of a team's running jobs into its guarantee, so a fill can resume
from a saved point of the team's previous fill up to which both running tuples agree: an eviction changes the
tuple from its victim on, and the prefix before it fills the same way. A fill saves its state before every
:data:`STRIDE`-th job. :class:`~.fairshare.RememberingFairShare` fills this way, the plain
:class:`~scheduler.core.rules.fairshare.FairShare` from the first job every time: the same answers
(``tests/scheduler/core/speedups/test_victims.py`` compares them).
"""

from __future__ import annotations

from scheduler.core.model.tables import Tables

STRIDE = 32  # how often a fill saves its state

Checkpoint = tuple[int, tuple[tuple[str, int], ...], int]  # (units held, units per class, borrowed so far)
Start = tuple[int, int, dict[str, int], list[str], list[Checkpoint]]


class FillResume:
    """Per team, its last fill: where the next one resumes (its memory is a table of ``tables``)."""

    def __init__(self, tables: Tables) -> None:
        self._last: dict[str, tuple[tuple[str, ...], list[Checkpoint], list[str]]] = tables.table()

    def start(self, team: str, running: tuple[str, ...]) -> Start:
        """(position to resume at, units held, units per class, borrowed jobs, checkpoints up to there) for a
        fill of ``running``: the state of the team's last fill at its last checkpoint both tuples share."""
        last = self._last.get(team)
        if last is None:
            return 0, 0, {}, [], [(0, (), 0)]
        previous, checkpoints, borrowed = last
        start = min(common_prefix(previous, running) // STRIDE, len(checkpoints) - 1)
        held, filled, count = checkpoints[start]
        return start * STRIDE, held, dict(filled), borrowed[:count], checkpoints[: start + 1]

    @staticmethod
    def saves_at(position: int, resume: int) -> bool:
        """Does a fill that resumed at ``resume`` save its state before the job at ``position``?"""
        return position % STRIDE == 0 and position != resume

    def save(self, team: str, running: tuple[str, ...], checkpoints: list[Checkpoint], borrowed: list[str]) -> None:
        self._last[team] = (running, checkpoints, borrowed)


def common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (binary search on slice equality, which runs in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low
