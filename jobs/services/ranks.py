"""The rank rule: how a lead's order is written so that it keeps its promise.

Within a team, the engine takes pending jobs by priority, then a job resuming after an infrastructure loss,
then ``rank``, submit time and id (``scheduler.core.rules.fairshare.job_key``; the portal's
:func:`jobs.services.team_order_key`). A job is submitted with rank 0 unless a lead claims another. Hence the
rule, which the manage page's help line states:

- **The portal never writes a positive rank.** Every job already in the queue then has a rank of 0 or less,
  and a job submitted later — rank 0, a later submit time — sorts behind all of them: ordering the queue never
  puts work behind jobs that arrive after it. A positive rank is only ever a lead's explicit choice through
  the API or the admin ("behind work submitted later, too"), as a positive ``nice`` is in Slurm.
- **A move passes one neighbour.** Moving a job up or down swaps it with the next job of its class (same
  priority and resuming or not; a job of another class is ahead for another reason, which a rank cannot
  change) and changes nobody else's place. It writes the moved job's rank only, when a whole number puts it
  between its new neighbours; when none does, the jobs ahead of its new place are lowered just enough, each
  keeping its place (their order among themselves and against every other job is unchanged).
- **A whole reorder** (the API's ``/queue/reorder/``) gives the listed jobs of each priority the ranks
  −(n−1) … 0 in the order given, unless that order already holds, when nothing is written.

Submit times that are exactly equal are never relied on to separate two jobs of one rank: the engine breaks
that tie by the id as a string and the portal by the number, so a rank written here always decides alone.
These are pure functions over :class:`Entry` rows in the engine's order; :mod:`jobs.services.changes` locks and
writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

MAX_RANK = 2_147_483_647  # IntegerField; scheduler.core.sizing.bounds.MAX_RANK
_UNBOUNDED = 4 * MAX_RANK  # no neighbour on that side: beyond any rank (a result beyond the column is refused)


@dataclass(frozen=True)
class Entry:
    """One pending job of a class (team, priority, resuming or not) as the rank rule needs it."""

    pk: int
    rank: int
    submitted_at: datetime


def _before(a: Entry, rank_a: int, b: Entry, rank_b: int) -> bool:
    """Does ``a`` at ``rank_a`` surely sort before ``b`` at ``rank_b`` (module doc: equal times never count)?"""
    return rank_a < rank_b or (rank_a == rank_b and a.submitted_at < b.submitted_at)


def in_order(entries: Sequence[Entry], ranks: Mapping[int, int]) -> bool:
    """Do ``entries`` sort in the given order by ``ranks`` (and their submit times)?"""
    return all(_before(a, ranks[a.pk], b, ranks[b.pk]) for a, b in pairwise(entries))


def move(entries: Sequence[Entry], pk: int, *, up: bool) -> dict[int, int]:
    """The ranks to write (job id → rank) to move job ``pk`` one place ``up`` (or down) among ``entries``, a
    class's pending jobs in the engine's order. Empty when it has no neighbour that way."""
    order = list(entries)
    i = next(n for n, e in enumerate(order) if e.pk == pk)
    j = i - 1 if up else i + 1
    if not 0 <= j < len(order):
        return {}
    order[i], order[j] = order[j], order[i]
    ranks = {e.pk: e.rank for e in order}
    moved = order[j]
    ahead = order[j - 1] if j > 0 else None
    behind = order[j + 1] if j + 1 < len(order) else None
    lo, hi = _room(moved, ahead, behind, ranks)
    if lo > hi and ahead is not None:
        # No whole number fits: lower the job just ahead by the gap, and each job before it as far as needed
        # to stay before the next one; then the room is there (a gap is at most 2: see _room).
        ranks[ahead.pk] -= lo - hi
        for k in range(j - 2, -1, -1):
            e, nxt = order[k], order[k + 1]
            if _before(e, ranks[e.pk], nxt, ranks[nxt.pk]):
                break
            ranks[e.pk] = ranks[nxt.pk] if e.submitted_at < nxt.submitted_at else ranks[nxt.pk] - 1
        lo, hi = _room(moved, ahead, behind, ranks)
    if lo <= hi:
        ranks[moved.pk] = min(max(moved.rank, lo), hi)  # the nearest to its rank now: the smallest change
    if lo > hi or not in_order(order, ranks) or max(abs(r) for r in ranks.values()) > MAX_RANK:
        ranks = {e.pk: r for e, r in zip(order, dense(len(order)), strict=True)}  # the ranks ran out: write all
    return {e.pk: ranks[e.pk] for e in order if ranks[e.pk] != e.rank}


def _room(moved: Entry, ahead: Entry | None, behind: Entry | None, ranks: Mapping[int, int]) -> tuple[int, int]:
    """The whole ranks (lo … hi) that put ``moved`` after ``ahead`` and before ``behind``, never above 0 unless
    the job ahead of it is already ranked behind later work (then it must be too)."""
    lo, hi = -_UNBOUNDED, _UNBOUNDED
    if ahead is not None:
        lo = ranks[ahead.pk] if ahead.submitted_at < moved.submitted_at else ranks[ahead.pk] + 1
    if behind is not None:
        hi = ranks[behind.pk] if moved.submitted_at < behind.submitted_at else ranks[behind.pk] - 1
    if ahead is None or ranks[ahead.pk] <= 0:
        hi = min(hi, 0)
    return lo, hi


def dense(n: int) -> list[int]:
    """Ranks for ``n`` jobs in order, the last at 0: −(n−1) … 0."""
    return list(range(1 - n, 1))


def reorder(entries: Sequence[Entry], order: Sequence[int]) -> dict[int, int]:
    """The ranks to write (job id → rank) so that ``entries`` (one priority of a team) run in ``order`` (their
    ids, each once): nothing when that order already holds, else −(n−1) … 0 in that order."""
    by_pk = {e.pk: e for e in entries}
    wanted = [by_pk[pk] for pk in order]
    if in_order(wanted, {e.pk: e.rank for e in wanted}):
        return {}
    return {e.pk: r for e, r in zip(wanted, dense(len(wanted)), strict=True) if r != e.rank}
