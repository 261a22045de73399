"""No whole-turn repeat for a shape that already failed at the same state: a waiting job's turn whose every step
would certainly answer as an earlier job's did gets that job's blocker without running its steps.

On a long queue most pending jobs share a handful of shapes and most of them fail; past its team's preemption
search bound (:mod:`scheduler.core.rules.search_bound`) a job's turn reads almost nothing of the job beyond its
shape, team and class, and nothing of the cycle beyond its state. A turn is repeated only when all of this holds
(:class:`TurnRepeats`):

- **Whom.** A job other than production, past its team's search bound (:attr:`Run.past_bound`), is asked; an earlier
  job of the same key — its team, priority, preemptible flag and placement shape
  (:func:`~scheduler.core.model.shape.placement_shape`) — took a turn that ended waiting (``not-ready``,
  ``capacity`` or ``quota``), changed nothing, and could not make a reservation nor take back backfilled work
  (:func:`~scheduler.core.decisions.reservation.would_reserve` False).
- **When.** Nothing changed since that matters to it. Every change of the state — a bind, an eviction, a
  reservation's hold, a reconfiguration, a node closed — draws a new ``version`` token of the capacity index, and
  one that frees capacity the index offers a new ``freed`` token too; a rolled-back Statement restores the state
  and both tokens exactly (:mod:`scheduler.core.placement.index`). A turn that ended for ``quota`` is repeated only
  at the same ``version`` (an equal state); one that ended for ``capacity`` or ``not-ready`` at the same ``freed``
  and the same ready nodes (the index's ``group_of``, which only loses nodes in a cycle, so an equal count is an
  equal set): what was placed since only took capacity, and nothing that found no room finds room after it — the
  rule every failure memory of placement rests on (:mod:`scheduler.core.planning.cycle`, Speed). Either way the
  number of reservations made is the same, and the earlier turn began and ended at one ``version``.
- **Backfill.** When the earlier turn ended, each reservation that held GPUs had a remembered failure of backfill's
  choice, with its hold lifted, for the job's placement shape or for its team and
  :attr:`~scheduler.core.model.shape.Shape.preemption`, at the index's ``freed`` then
  (:meth:`~scheduler.core.decisions.reservation.Reservations.backfill_known_unplaced`). Both stamps above hold the
  ``freed`` token and the number of reservations made, so that is still so: the holds change only by a
  reservation made or by backfill shrinking one (which frees its holder's GPUs), and a failure once remembered at
  a ``freed`` is only ever written again at that ``freed``.

Why each step of :data:`~scheduler.core.planning.steps.OTHER_STEPS` then answers as it did for the earlier job:

- ``not_ready``: the options (:func:`~scheduler.core.placement.options.options_for`) read the job's sizing shape
  (part of the placement shape) and the index's ready nodes — unchanged (a node closed draws a token).
- ``choose``: :func:`~scheduler.core.decisions.choose.choose` reads the job's placement shape (``find_slots``,
  ``possible_units``), and fair share's admission reads its team, priority and preemptible flag and the team's
  usage, which the state holds: at an equal state the same choice and the same refusal (its reason is written from
  the same figures). A turn that ended for ``capacity`` found no placement at all (a refused one ends for
  ``quota``, an admitted one binds), asked no admission, and finds none while nothing is freed.
- ``backfill``: it acts only while the quota has not refused (the same as the earlier job's). Its loop over the
  reservations reads the job's run-time estimate and its place in the order (:func:`may_ever_backfill`), which
  may differ — but every reservation holding GPUs is then passed over by the remembered failure (the Backfill
  condition, whose keys are the job's key's), and one holding none is always passed over. ``would_reserve``
  reads the job's priority, host needs and first option (placement shape, options) and the number of
  reservations made: False, as it was, so the job takes nothing back (``take_back``, which reads its submit time,
  is never asked).
- ``idle_whole_gpu``: :func:`~scheduler.core.placement.fallback.whole_gpu_slots` reads the placement shape and the
  index, and the admission as ``choose``; after a ``capacity`` turn it found no idle GPU, and finds none while
  nothing is freed.
- ``preempt``: the job is past its team's bound — the step's first question, which ends it.
- ``reserve``: with ``would_reserve`` False (and not production), :meth:`Reservations.reserve` answers None at its
  first test (the depth reached, or a request that cannot be reserved), so the step asks no quota.
- ``wait``: the quota's refusal (the same), past the bound (the same): the same blocker.

The turn enters the order and the bound's count as always (:meth:`Run.enter`, before the turn); a skipped turn
gives the job the earlier job's blocker, equal by value to what its steps would give. What a turn only
remembers (the caches of the steps it skips) is exact wherever it is asked: a later job that needs it works it
out. Exact as long as no skipped turn's evaluation would raise: the isolation
(:mod:`scheduler.core.model.isolation`) would plan the cycle again without that job — an engine bug, not a
rule, as for :mod:`.focus`. With the speed-ups off no turn is skipped; ``tests/scheduler/core/speedups/
test_repeat.py`` compares plans with them on and off.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping, Set

from scheduler.core.decisions.reservation import Reservations, would_reserve
from scheduler.core.model.explain import Blocker
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import BlockerKind, Priority
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import options_for
from scheduler.core.speedups.memo import Memo

Stamp = tuple[int, int, int]  # the index's version (or ready nodes) and freed tokens, and the reservations made

# The blockers a turn that changed nothing ends with, when the job cannot reserve and is past the search bound.
REPEATABLE = frozenset({BlockerKind.NOT_READY, BlockerKind.CAPACITY, BlockerKind.QUOTA})


class TurnRepeats:
    """The outcomes of the cycle's turns that may be repeated (module doc), per key, with the state they hold at.

    ``past_bound`` and ``blockers`` are the run's (:attr:`Run.past_bound`, :attr:`Run.blockers`), read live."""

    def __init__(
        self,
        index: CapacityIndex,
        reservations: Reservations,
        policy: Policy,
        past_bound: Set[str],
        blockers: MutableMapping[str, Blocker],
        memo: Memo,
    ) -> None:
        self.index = index
        self.reservations = reservations
        self.policy = policy
        self.past_bound = past_bound
        self.blockers = blockers
        self._outcomes: dict[Hashable, tuple[Stamp, Blocker]] = memo.table()

    def take(self, job: Job, turn: Callable[[], None]) -> None:
        """Take ``job``'s turn by running ``turn`` (its steps), or give it the blocker an earlier turn of its key
        ended with when its steps would end alike (module doc)."""
        key = self._key(job)
        if key is None:
            turn()
            return
        repeated = self.repeated(job, key)
        if repeated is not None:
            self.blockers[job.id] = repeated
            return
        before = self.stamp()
        turn()
        self.took(job, key, before)

    def stamp(self) -> Stamp:
        """The state as a turn reads it: equal stamps, an equal state (module doc, When)."""
        return (self.index.version, self.index.freed, len(self.reservations.made))

    def _state(self, kind: BlockerKind) -> Stamp:
        """What a turn that ended for ``kind`` reads of the state (module doc, When): all of it for the quota;
        for capacity or a node, the ready nodes and the ``freed`` token."""
        if kind == BlockerKind.QUOTA:
            return self.stamp()
        return (len(self.index.group_of), self.index.freed, len(self.reservations.made))

    def repeated(self, job: Job, key: Hashable) -> Blocker | None:
        """The blocker ``job`` (of ``key``) would end its turn with, known from an earlier turn without running its
        steps; None when it is not known (module doc)."""
        outcome = self._outcomes.get(key)
        if outcome is None or outcome[0] != self._state(outcome[1].kind):
            return None
        return outcome[1]

    def took(self, job: Job, key: Hashable, before: Stamp) -> None:
        """``job`` (of ``key``) took its turn, begun at ``before`` (:meth:`stamp`): remember its outcome for the
        jobs of its key, when it may be repeated (module doc, Whom)."""
        blocker = self.blockers.get(job.id)
        if blocker is None or blocker.kind not in REPEATABLE or self.stamp() != before:
            return
        options = options_for(self.index, job, self.policy)
        if would_reserve(job, options, len(self.reservations.made), self.policy):
            return
        if not self.reservations.backfill_known_unplaced(job):
            return
        self._outcomes[key] = (self._state(blocker.kind), blocker)

    def _key(self, job: Job) -> Hashable | None:
        """What of ``job`` its turn reads (module doc), or None when its turn is never repeated."""
        if job.priority == Priority.PRODUCTION or job.id not in self.past_bound:
            return None
        return (job.team, job.priority, job.preemptible, placement_shape(job))


class EveryTurn:
    """The plain rule, with the speed-ups off: every job takes its whole turn."""

    @staticmethod
    def take(job: Job, turn: Callable[[], None]) -> None:
        """Take ``job``'s turn by running ``turn`` (its steps)."""
        turn()
