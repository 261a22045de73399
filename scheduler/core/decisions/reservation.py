"""Reservations and backfill: a job at the head of the order that cannot start gets the GPUs the running
work frees first, and lower work fills the holes only if it does not delay it (Slurm's backfill scheduler).

Rules (``docs/scheduling-rules.md`` §5a):

1. **Who gets one.** A pending job whose turn found no capacity and whose quota (guarantee and burst limit)
   admits it — now, or at the reservation's start, once the team's own work expected to end by then has freed
   its share (a job whose quota would still refuse it then waits for the quota, not for GPUs: no reservation,
   no start time) — that asks
   for whole GPUs and states no host CPU or memory, among the first ``policy.reservation_depth`` such jobs in
   the cycle's order (0: no reservations, plain greedy order as before).
2. **Where and when.** For each GPU model the job may use now (its placement options), every GPU without a
   MIG layout on a ready node of an allowed tier and group is *expected free* at: now when it is idle; else
   the latest time the work on it frees it for this job — its expected end (rule 5), or, for work the job may
   evict on a ground of :mod:`scheduler.core.decisions.preemption`, the time that work may be evicted (its minimum
   runtime passed; at once for production) when that comes first: the job then starts by preemption; work
   that would yield to the job (rule 6) alike, once its minimum runtime has passed. GPUs
   of an earlier reservation of the cycle are not counted. A replica needs its GPUs on one node, so a node
   can host ``k`` replicas from the time its ``k × gpus``-th earliest GPU is free; the reservation's start
   ``T`` is the time the job's last replica can be hosted, and its GPUs those of the nodes that host
   replicas earliest (ties: the node that hosts more, then by name). The model with the earliest ``T`` that
   the job's quota admits (rule 1, per GPU class) is taken (ties: the job's option order). A job for which
   the earliest ``T`` would be now failed for some other reason than busy GPUs and gets no reservation.
3. **Hold.** The reserved GPUs that are idle now are *held* for the job: a placeholder occupies them for the
   rest of the cycle (it counts against no team), so no later job binds there and no MIG reconfiguration
   touches their nodes — except by backfill.
4. **Backfill.** A later job may take held GPUs when it is production (production must always run), when
   it is expected to end by ``T`` (now + its estimate ≤ ``T``), or when it is preemptible work that would
   yield them back (:func:`~scheduler.core.rules.eviction.may_yield`: behind the reserving job in the order,
   and of its team or borrowing on the GPUs it takes), however long it runs: the reserving job takes the GPUs
   back when it can start on them (rule 6). Such a job is offered the held GPUs after free capacity and
   before any eviction.
5. **Run-time estimates.** A job's ``duration_s``; else its team's history (``Team.typical_runtime_s``, the
   median run time of its recently finished jobs); else ``policy.default_runtime_s``. A running job is
   expected to end at its start plus its estimate, and one already past it one cycle from now (never in the
   past).

6. **Taking back.** A job whose turn may make a reservation (it asks whole GPUs, and fewer than
   ``policy.reservation_depth`` were made before it) and that free capacity cannot take evicts the work
   that backfilled in front of it (:func:`~scheduler.core.rules.eviction.backfill_candidates`: preemptible,
   behind it in the order, started while it waited, of its team or borrowed, past its minimum runtime) when
   that alone lets it start: the ``"backfill"`` eviction, *yielded to the reservation it backfilled*
   (:func:`take_back`). The victims are the fewest that make room, found by the preemption search
   (:mod:`scheduler.core.decisions.preemption`) among these candidates alone. Nothing remembers which job
   backfilled which reservation: the ground is read from the running work, so it holds in every later cycle.

The reservation's start is the reserving job's expected start (its ETA, :mod:`scheduler.core.model.explain`).
Reservations are planned anew every cycle from the running work's expected ends; nothing is remembered.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from scheduler.core.decisions.choose import Choice
from scheduler.core.decisions.preemption import NO_SHORTCUTS, fewest_victims, victims_remove
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.plan import Evict
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import Shape, placement_shape
from scheduler.core.model.snapshot import Job, Request, Slot, Slots, Team
from scheduler.core.model.tables import FORGET, Tables
from scheduler.core.model.vocabulary import Priority
from scheduler.core.placement.index import CapacityIndex
from scheduler.core.placement.options import Option
from scheduler.core.rules.eviction import Candidate, backfill_candidates, by_key, may_yield
from scheduler.core.rules.fairshare import FairShare

GpuKey = tuple[str, int]
# backfill_candidates' signature: (state, fairness, policy, now, job, spared) → candidates in preference order.
BackfillCandidates = Callable[[ClusterState, FairShare, Policy, float, Job, frozenset[str]], list[Candidate]]

# The placeholder's team: a name no team can have (teams are Kubernetes namespaces), so no quota counts it.
HOLDER_TEAM = "\x00reservation"


@dataclass(frozen=True, slots=True)
class Reservation:
    """``job`` starts at ``start_at`` on ``gpus`` (rule 2); ``held`` are those idle now, occupied in the state
    by ``holder`` (rule 3) until backfill takes them."""

    job: Job
    start_at: float
    gpus: tuple[GpuKey, ...]
    held: tuple[GpuKey, ...]
    holder: Job


def expected_runtime(job: Job, team: Team | None, policy: Policy) -> float:
    """Rule 5: ``duration_s``, else the team's typical run time, else the policy's default."""
    if job.duration_s is not None:
        return job.duration_s
    if team is not None and team.typical_runtime_s is not None:
        return team.typical_runtime_s
    return policy.default_runtime_s


def reservable(job: Job, options: tuple[Option, ...]) -> bool:
    """Rule 1, what the job asks: whole GPUs on its preferred option, no host CPU or memory."""
    return bool(options) and options[0].demand.kind == DemandKind.WHOLE and not (job.cpu_milli or job.memory_mib)


def may_backfill(job: Job, reservation: Reservation, runtime_s: float, now: float, borrowing: bool) -> bool:
    """Rule 4: may ``job`` (expected to run ``runtime_s``; ``borrowing``: above its guarantee on the GPUs it
    would take) take ``reservation``'s held GPUs?"""
    if job.priority == Priority.PRODUCTION or now + runtime_s <= reservation.start_at:
        return True
    return may_yield(job, reservation.job, borrowing)


def may_ever_backfill(job: Job, reservation: Reservation, runtime_s: float, now: float) -> bool:
    """Could :func:`may_backfill` say yes for some placement: it is asked before one is looked for."""
    return may_backfill(job, reservation, runtime_s, now, True)


def would_reserve(job: Job, options: tuple[Option, ...], made: int, policy: Policy) -> bool:
    """Rule 6, who takes back: a job whose turn may still make a reservation (rule 1, what it asks, and the
    depth), other than production (which evicts lower work on its own ground)."""
    return job.priority != Priority.PRODUCTION and made < policy.reservation_depth and reservable(job, options)


def take_back(
    state: ClusterState,
    fairness: FairShare,
    job: Job,
    policy: Policy,
    now: float,
    spared: frozenset[str],
    place: Callable[[], Slots | None],
    candidates: BackfillCandidates = backfill_candidates,
) -> tuple[list[Evict], Slots] | None:
    """Rule 6: the ``"backfill"`` evictions that let ``job`` start, and the slots ``place()`` (a placement on free
    capacity, admitted by the quota) then gives it, or None with nothing changed. ``spared``: the jobs that
    evicted ``job`` within the ping-pong window. On success the victims are removed from ``state`` and
    reported to fair share; the caller binds the job on the slots. ``candidates`` finds the victims the rule
    allows: the rule itself, or the cycle's speed-up that answers as it does
    (:class:`~scheduler.core.speedups.takeback.KeptBackfillCandidates`)."""
    pool = candidates(state, fairness, policy, now, job, spared)
    if not pool:
        return None
    found = fewest_victims(state, job, place, pool, NO_SHORTCUTS)
    if found is None:
        return None
    victims, slots = found
    victims_remove(state, fairness, victims)
    return [Evict(job=c.job.id, reason=c.reason, by=job.id) for c in sorted(victims, key=by_key)], slots


class Reservations:
    """The cycle's reservations, in the order they were made, and their holds in ``state``.

    ``frees_at(job, holder)`` is when placed job ``holder`` frees its GPUs for ``job`` (rule 2); ``bound(slots)``
    tells the cycle's reconfigurations that a node took work (held GPUs keep their nodes unchanged, rule 3)."""

    def __init__(
        self,
        state: ClusterState,
        index: CapacityIndex,
        policy: Policy,
        now: float,
        frees_at: Callable[[Job, str], float],
        bound: Callable[[Slots], None],
        tables: Tables = FORGET,
    ) -> None:
        self.state = state
        self.index = index
        self.policy = policy
        self.now = now
        self.frees_at = frees_at
        self.bound = bound
        self.made: list[Reservation] = []
        self._taken: set[GpuKey] = set()  # GPUs of the reservations made so far (rule 2)
        # ((holder, its held GPUs), placement shape, or team and Shape.preemption) → the index's ``freed`` when
        # the choice found no slots with that hold lifted (see backfill)
        self._unplaced: dict[Hashable, int] = tables.table()

    def held(self) -> frozenset[GpuKey]:
        """Every GPU held now, by any reservation."""
        return frozenset(key for reservation in self.made for key in reservation.held)

    def reserve(
        self, job: Job, options: tuple[Option, ...], admits_at: Callable[[float, str], bool] | None = None
    ) -> Reservation | None:
        """Rules 1–3 for ``job`` (the caller has found it blocked by capacity): the reservation made and held, or
        None. ``admits_at(T, model)``, when given, is whether the job's quota admits it on GPU model ``model`` at
        the start ``T`` found there (rule 1): a model it refuses is passed over for the next earliest."""
        if len(self.made) >= self.policy.reservation_depth or not reservable(job, options):
            return None
        if any(reservation.job.id == job.id for reservation in self.made):
            return None  # a production job's second turn in the cycle (its retry) keeps the one it has
        by_model: dict[str, tuple[int, list[str]]] = {}
        for option in options:
            if option.demand.kind != DemandKind.WHOLE:
                continue
            _, names = by_model.setdefault(option.model, (option.demand.gpus, []))
            names.extend(self.index.groups.get(option.group, ()))
        found: list[tuple[float, int, str, tuple[GpuKey, ...]]] = []  # (T, the job's option rank, model, GPUs)
        for rank, (model, (per_replica, names)) in enumerate(by_model.items()):
            earliest = self._earliest(job, sorted(set(names)), per_replica)
            if earliest is not None:
                found.append((earliest[0], rank, model, earliest[1]))
        found.sort(key=lambda candidate: candidate[:2])
        if not found or found[0][0] <= self.now:
            return None
        chosen = next((c for c in found if admits_at is None or admits_at(c[0], c[2])), None)
        if chosen is None:
            return None
        start_at, _, _, gpus = chosen
        held = tuple(key for key in gpus if self.state.gpus[key].idle)
        holder = Job(id=f"{HOLDER_TEAM}:{job.id}", team=HOLDER_TEAM, request=Request(gpus=1), replicas=len(held))
        reservation = Reservation(job, start_at, gpus, held, holder)
        self._hold(reservation)
        self.made.append(reservation)
        self._taken.update(gpus)
        return reservation

    def _earliest(self, job: Job, names: list[str], per_replica: int) -> tuple[float, tuple[GpuKey, ...]] | None:
        """Rule 2 on the nodes ``names``: (T, the GPUs) or None when they cannot host every replica."""
        hosts: list[tuple[float, int, str]] = []  # (time a node hosts its k-th replica, -k, node)
        free_at: dict[str, list[tuple[float, int]]] = {}
        for name in names:
            times = sorted(
                (self._free_at(job, gpu.key), gpu.index)
                for gpu in self.state.node_gpus(name)
                if not gpu.layout and gpu.key not in self._taken
            )
            free_at[name] = times
            for k in range(1, len(times) // per_replica + 1):
                hosts.append((times[k * per_replica - 1][0], -k, name))
        return self._chosen(job, hosts, free_at, per_replica)

    @staticmethod
    def _chosen(
        job: Job, hosts: list[tuple[float, int, str]], free_at: dict[str, list[tuple[float, int]]], per_replica: int
    ) -> tuple[float, tuple[GpuKey, ...]] | None:
        """Rule 2's choice among the nodes' ``hosts`` (time a node hosts its k-th replica, -k, node), given each
        node's GPUs ``free_at`` (time, GPU index), sorted: (T, the GPUs) or None."""
        if len(hosts) < job.replicas:
            return None
        first = heapq.nsmallest(job.replicas, hosts)
        start_at = first[-1][0]
        count: dict[str, int] = {}
        for _, _, name in first:
            count[name] = count.get(name, 0) + 1
        gpus = tuple((name, index) for name in sorted(count) for _, index in free_at[name][: count[name] * per_replica])
        return start_at, gpus

    def _free_at(self, job: Job, key: GpuKey) -> float:
        gpu = self.state.gpus[key]
        if gpu.idle:
            return self.now
        return max(self.frees_at(job, holder) for holder in sorted(gpu.holders()))

    def _hold(self, reservation: Reservation) -> None:
        if reservation.held:
            slots = tuple((Slot(node, index),) for node, index in reservation.held)
            self.state.place(reservation.holder, slots)
            self.bound(slots)

    def backfill_known_unplaced(self, job: Job) -> bool:
        """Would :meth:`backfill` pass over every reservation for ``job`` without a choice, whatever the job's run
        time and place in the order: each one holding GPUs has a remembered failure (its Speed paragraph) for the
        job's placement shape, or for its team and :attr:`Shape.preemption`, at the index's ``freed`` now? A
        reservation holding none is always passed over. Asked by a speed-up (:mod:`scheduler.core.speedups.repeat`);
        with the speed-ups off nothing is remembered, and a reservation holding GPUs makes the answer False."""
        freed = self.index.freed
        placement = placement_shape(job)
        preemption = (placement, job.priority, job.preemptible)  # Shape.of(job).preemption, built directly
        for reservation in self.made:
            if not reservation.held:
                continue
            hold = (reservation.holder.id, reservation.held)
            unfitted, refused = (hold, placement), (hold, job.team, preemption)
            if self._unplaced.get(unfitted) != freed and self._unplaced.get(refused) != freed:
                return False
        return True

    def backfill(
        self,
        job: Job,
        runtime_s: float,
        choose: Callable[[], Choice],
        borrowing: Callable[[Slots], bool],
    ) -> Slots | None:
        """Rule 4: a placement of ``job`` that uses the held GPUs of a reservation it may backfill, found by
        ``choose()`` (the choice on free capacity, :func:`~scheduler.core.decisions.choose.choose`: its ``slots``
        are admitted by the quota) with that reservation's hold lifted,
        or None. ``borrowing(slots)``: would the job hold ``slots`` above its guarantee (asked with the hold
        lifted). On success the hold keeps only the GPUs the placement leaves; the caller binds the job.

        Speed: when the choice found no slots with a hold lifted, it finds none with the same hold lifted until
        capacity is freed (the index's ``freed``) — binding only takes capacity and adds usage, as for a failed
        preemption (:mod:`scheduler.core.planning.cycle`, Speed) — for any job of the same placement shape when
        nothing fitted (``best`` None: placement reads nothing else of a job), else for a job alike in what the
        quota reads too (its team, and :attr:`Shape.preemption`)."""
        for position, reservation in enumerate(self.made):
            if not reservation.held or not may_ever_backfill(job, reservation, runtime_s, self.now):
                continue
            hold = (reservation.holder.id, reservation.held)
            unfitted, refused = (hold, placement_shape(job)), (hold, job.team, Shape.of(job).preemption)
            freed = self.index.freed
            if self._unplaced.get(unfitted) == freed or self._unplaced.get(refused) == freed:
                continue
            statement = self.state.begin()
            self.state.remove(reservation.holder.id)
            choice = choose()
            slots = choice.slots
            allowed = slots is not None and may_backfill(job, reservation, runtime_s, self.now, borrowing(slots))
            statement.rollback()
            if slots is None:
                self._unplaced[unfitted if choice.best is None else refused] = freed
            if slots is None or not allowed:
                continue
            taken = {(slot.node, slot.gpu) for replica in slots for slot in replica}
            self.state.remove(reservation.holder.id)
            left = tuple(key for key in reservation.held if key not in taken)
            holder = Job(
                id=reservation.holder.id, team=HOLDER_TEAM, request=reservation.holder.request, replicas=len(left)
            )
            shrunk = Reservation(reservation.job, reservation.start_at, reservation.gpus, left, holder)
            self.made[position] = shrunk
            self._hold(shrunk)
            return slots
        return None
