"""Spot notices and admins' drains in the scheduling loop: drain the node, let its jobs checkpoint, requeue them
whole.

An admin's drain (:func:`scheduler.node_states.node_drain`, ``kubectl drain``'s and Slurm's DRAIN) goes through
the same steps as a notice without a deadline, source ``admin-drain``: its jobs get the loop's usual eviction grace
(as ``kubectl drain`` gives each pod its own termination grace period) and are requeued with reason
``node-drain``, at the head of their priority like a spot interruption's.

A node whose observation carries an :class:`~scheduler.gateways.protocol.Interruption` is going away
(``docs/gpu-facts.md``, Spot and preemption signals). The cycle's reconciliation (:mod:`scheduler.loop.reconcile`)
handles it, and nothing else does:

1. the node is marked ``draining`` in the inventory (the snapshot already closes it to new work);
2. every running job holding devices on it gets one ``draining`` event for its run (details: node, source,
   deadline, grace_s) — :func:`drains_record`;
3. each drained job whose replicas still run is evicted, reason ``spot-reclaim``, with a grace that fits inside
   the notice (:func:`notice_grace_s`): the SIGTERM asks the job to checkpoint now. The job stays ``running``
   while its pods stop (``ReplicaPhase.STOPPING``), so the checkpoint it reports meanwhile is recorded against
   the run that wrote it;
4. once none of its replicas is left (or the notice's deadline plus the grace has passed: :attr:`Drain.give_up_at`),
   the job is requeued whole, every replica of a gang at once (``spot-reclaim``). The snapshot then puts it at
   the head of its priority (``Job.resumes``), and its next bind resumes it from its newest checkpoint.

The interruption task only looks (:func:`notices_unhandled`) and runs a cycle when a notice is not drained yet,
so a notice shorter than the cycle's period is still acted upon. A node that vanishes without a notice the loop
saw is a lost node (``node-lost``), as before.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Max, Q

from jobs.models import Allocation, JobEvent
from scheduler.bridge.vocabulary import ADMIN_DRAIN
from scheduler.core.model.vocabulary import EventType, JobState, NodeState, NodeStateSource
from scheduler.gateways.protocol import Interruption, Observation
from scheduler.models import Node
from scheduler.node_states import node_state_observe

NOTICE_MARGIN_S = 5.0  # kept back from the notice: the pod's deletion and the node's own shutdown take a moment
MIN_GRACE_S = 3.0  # a job always gets a few seconds to save, even when the notice is nearly over


@dataclass(frozen=True, slots=True)
class Drain:
    """A running job asked to stop by a notice: its ``draining`` event since its last bind."""

    node: str
    source: str
    drained_at: float  # epoch seconds
    deadline_at: float | None  # when the node is expected to go; None: the notice did not say
    grace_s: float  # the grace the job was given

    @property
    def by_admin(self) -> bool:
        """An admin's drain (:func:`scheduler.node_states.node_drain`), not a notice that the node goes away."""
        return self.source == ADMIN_DRAIN

    @property
    def give_up_at(self) -> float:
        """After this the loop stops waiting for the job's pods to stop and requeues it anyway."""
        return (self.deadline_at if self.deadline_at is not None else self.drained_at) + self.grace_s


def notice_grace_s(*, deadline_at: float | None, now: float, evict_grace_s: float) -> float:
    """The grace of an eviction on a notice: the loop's usual grace, cut to end :data:`NOTICE_MARGIN_S` before the
    node goes, and never below :data:`MIN_GRACE_S` (a save that cannot finish in time is the job's loss, a
    SIGKILL without a chance to try is ours)."""
    grace = evict_grace_s if deadline_at is None else min(evict_grace_s, deadline_at - now - NOTICE_MARGIN_S)
    return round(max(grace, MIN_GRACE_S), 3)


def _noticed(observation: Observation) -> dict[str, Interruption]:
    """The nodes to drain: those under an interruption notice, and those an admin drains (as a notice without a
    deadline, from when the admin drained the node; a notice on the same node wins, since it has one)."""
    noticed = {node.name: node.interruption for node in observation.nodes if node.interruption is not None}
    drained = Node.objects.filter(state=NodeState.DRAINING, state_source=NodeStateSource.ADMIN).exclude(
        name__in=list(noticed)
    )
    for name, since in drained.values_list("name", "state_changed_at"):
        noticed[name] = Interruption(
            noticed_at=since.timestamp() if since is not None else observation.observed_at,
            deadline_at=None,
            source=ADMIN_DRAIN,
        )
    return noticed


def _holders(nodes: Collection[str]) -> dict[int, str]:
    """Running job id → the first noticed node (by name) it holds devices on."""
    holders: dict[int, str] = {}
    rows = (
        Allocation.objects.filter(node__name__in=list(nodes), ended_at__isnull=True, job__state=JobState.RUNNING)
        .order_by("node__name", "job_id")
        .values_list("job_id", "node__name")
    )
    for job_id, node in rows:
        holders.setdefault(job_id, node)
    return holders


def notices_unhandled(*, observation: Observation) -> list[dict[str, object]]:
    """The running jobs on nodes under notice that the loop has not drained yet: what the next cycle drains.
    Read-only."""
    noticed = _noticed(observation)
    holders = _holders(noticed)
    drained = drains_current(holders)
    return [
        {"job": str(job_id), "node": node, "source": noticed[node].source}
        for job_id, node in sorted(holders.items())
        if job_id not in drained
    ]


def drains_record(*, observation: Observation, at: datetime, evict_grace_s: float) -> list[dict[str, object]]:
    """Steps 1 and 2 of the module doc, inside the caller's transaction: mark the noticed nodes ``draining`` and
    record a ``draining`` event for each running job on them that has none for its run. Returns what was
    recorded."""
    noticed = _noticed(observation)
    if not noticed:
        return []
    for node in Node.objects.filter(name__in=list(noticed)).exclude(state=NodeState.DRAINING):
        node_state_observe(node=node, reported=True, notice=noticed[node.name].source, at=at)
    holders = _holders(noticed)
    drained = drains_current(holders)
    recorded: list[dict[str, object]] = []
    for job_id, name in sorted(holders.items()):
        if job_id in drained:
            continue
        notice = noticed[name]
        when = max(at, datetime.fromtimestamp(notice.noticed_at, tz=UTC))
        grace = notice_grace_s(deadline_at=notice.deadline_at, now=at.timestamp(), evict_grace_s=evict_grace_s)
        deadline = datetime.fromtimestamp(notice.deadline_at, tz=UTC).isoformat() if notice.deadline_at else None
        details = {"node": name, "source": notice.source, "deadline": deadline, "grace_s": grace}
        JobEvent.objects.create(job_id=job_id, type=EventType.DRAINING, at=when, details=details)
        recorded.append({"job": str(job_id), **details})
    return recorded


def drains_current(job_ids: Iterable[int]) -> dict[int, Drain]:
    """The jobs among ``job_ids`` with a ``draining`` event recorded after their last ``bound`` event (by
    insertion order, which times cannot tie), each with its latest one."""
    ids = list(job_ids)
    if not ids:
        return {}
    return _drains(Q(job_id__in=ids))


def drains_running() -> dict[int, Drain]:
    """:func:`drains_current` of every running job (what reconcile asks each cycle), the jobs chosen by a join:
    thousands of ids as parameters cost more to pass than the rows to read."""
    return _drains(Q(job__state=JobState.RUNNING))


def _drains(jobs: Q) -> dict[int, Drain]:
    # The draining events first, then the last bind of only the jobs they name: a cycle reads in proportion to the
    # drains, which are few or none, not to the running jobs (on PostgreSQL the last bind of each of 5,759 running
    # jobs took 0.6 s a cycle: docs/benchmarks/loop.md, the twelfth session).
    events = list(
        JobEvent.objects.filter(jobs, type=EventType.DRAINING).order_by("id").only("id", "job_id", "at", "details")
    )
    if not events:
        return {}
    last_bound = dict(
        JobEvent.objects.filter(job_id__in={event.job_id for event in events}, type=EventType.BOUND)
        .values("job_id")
        .annotate(last=Max("id"))
        .values_list("job_id", "last")
    )
    drains: dict[int, Drain] = {}
    for event in events:
        if event.id > last_bound.get(event.job_id, 0):
            drains[event.job_id] = _drain(event)
    return drains


def _drain(event: JobEvent) -> Drain:
    details: Mapping[str, object] = event.details if isinstance(event.details, dict) else {}
    deadline = details.get("deadline")
    grace = details.get("grace_s")
    return Drain(
        node=str(details.get("node", "")),
        source=str(details.get("source", "")),
        drained_at=event.at.timestamp(),
        deadline_at=datetime.fromisoformat(deadline).timestamp() if isinstance(deadline, str) else None,
        # A draining event written before notices evicted (no grace recorded): wait no longer than the minimum.
        grace_s=float(grace) if isinstance(grace, int | float) else MIN_GRACE_S,
    )
