"""Stock kube-scheduler's priority preemption (``DefaultPreemption`` with PriorityClasses), for ``naive`` and
``k8s-default`` (spec/benchmarks.md B2: "preempt by priority as stock kube-scheduler does").

The PriorityClasses are the job's priority: production > high > normal > low. A job's ``preemptible`` flag is
Microcosm's idea, not Kubernetes': a stock cluster preempts any pod of lower priority, so it is ignored here.

Rules (kube-scheduler's PostFilter, ``pkg/scheduler/framework/preemption``), per replica that fits no node:

1. **Candidates**: every open node the replica may use whose GPUs would hold it if every pod of *strictly lower*
   priority on it were gone.
2. **Victims on a node** (``SelectVictimsOnNode``): remove every lower-priority job on the node, then reprieve
   them one by one, most important first (higher priority, then the earlier start), keeping each whose GPUs the
   replica does not need. What is left are the victims.
3. **The node** (``pickOneNodeForPreemption``; no PodDisruptionBudgets here): the lowest highest-victim priority,
   then the smallest sum of victim priorities, then the fewest victims, then the cluster's node order.

Where the model differs from a real cluster, and which way it leans (it flatters the baselines):

- A victim is a *job*: evicting one pod of a multi-pod job evicts all of it (the replay runs jobs whole), and
  all its GPUs become free, not only those on the chosen node.
- The preemptor binds in the same cycle as the eviction; kube-scheduler nominates the node and binds after the
  victims' graceful termination (30 s by default), a cycle or more later.
- A gang binds only when every replica found room (with or without preemption); otherwise nothing is evicted
  for it. Stock Kubernetes has no gang scheduling: it would bind the pods that fit and hold the GPUs idle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Running, Slot, Slots, Snapshot
from scheduler.core.model.vocabulary import Priority
from scheduler.sim.baselines.common import ChooseNode, Free, Need, Rescue, place_each, plan_fifo

RULES = "priority order, preempts lower priority like kube-scheduler"  # the waiting reason's words
_RANK = {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2, Priority.PRODUCTION: 3}


def rank(job: Job) -> int:
    """A PriorityClass value: higher is more important (the order of :class:`Priority`)."""
    return _RANK[Priority(job.priority)]


def queue_order(pending: Sequence[Job]) -> list[Job]:
    """kube-scheduler's default queue sort (``PrioritySort``): higher priority first, then submission order."""
    return sorted(pending, key=lambda job: (-rank(job), job.submitted_at))


@dataclass
class Victims:
    """The running jobs of one cycle that may be preempted, and those this cycle has already chosen."""

    running: dict[str, Running]
    on_node: dict[str, list[str]] = field(default_factory=dict)  # node → running jobs with a GPU there
    chosen: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, snapshot: Snapshot) -> Victims:
        on_node: dict[str, list[str]] = defaultdict(list)
        for run in snapshot.running:
            for node in dict.fromkeys(slot.node for replica in run.slots for slot in replica):
                on_node[node].append(run.job.id)
        return cls({run.job.id: run for run in snapshot.running}, dict(on_node))

    def whole_gpus(self, job: str, node: str) -> list[int]:
        """The whole GPUs (MIG off, not a share) ``job`` holds on ``node``: what its eviction frees there."""
        return [slot.gpu for replica in self.running[job].slots for slot in replica if _whole(slot, node)]


def _whole(slot: Slot, node: str | None = None) -> bool:
    return (node is None or slot.node == node) and slot.mig_profile is None and slot.milli >= 1000


def _importance(run: Running) -> tuple[int, float]:
    return (-rank(run.job), run.started_at)  # sorts the most important first


def victims_on(job: Job, node: Node, need: Need, free: Free, victims: Victims) -> list[str] | None:
    """The fewest lower-priority jobs on ``node`` whose eviction lets one replica of ``job`` fit (rule 2)."""
    if need.is_share or need.gpus > node.gpu_count:
        return None
    mine = rank(job)
    lower = [
        victims.running[j]
        for j in victims.on_node.get(node.name, ())
        if j not in victims.chosen and rank(victims.running[j].job) < mine
    ]
    available = len(free.whole[node.name]) + sum(len(victims.whole_gpus(r.job.id, node.name)) for r in lower)
    if available < need.gpus:
        return None
    chosen = []
    for run in sorted(lower, key=_importance):
        gpus = len(victims.whole_gpus(run.job.id, node.name))
        if available - gpus >= need.gpus:
            available -= gpus  # reprieved: the replica fits without its GPUs
        else:
            chosen.append(run.job.id)
    return chosen


def preempt_for_replica(
    job: Job, candidates: Sequence[tuple[Node, Need]], free: Free, victims: Victims
) -> tuple[Node, Need, list[str]] | None:
    """The node and victims for one replica of ``job`` that fits nowhere now (rules 1 and 3), or None."""
    best: tuple[tuple[int, int, int, int], Node, Need, list[str]] | None = None
    for order, (node, need) in enumerate(candidates):
        chosen = victims_on(job, node, need, free, victims)
        if not chosen:
            continue  # None: no room even so; []: it fits without preemption (the caller placed it then)
        ranks = [rank(victims.running[j].job) for j in chosen]
        key = (max(ranks), sum(ranks), len(chosen), order)
        if best is None or key < best[0]:
            best = (key, node, need, chosen)
    return None if best is None else best[1:]


def free_victims(chosen: Sequence[str], free: Free, victims: Victims) -> None:
    """Give every whole GPU of the ``chosen`` jobs back to ``free`` (tentatively: ``free.rollback`` undoes it)."""
    for job in chosen:
        victims.chosen.add(job)
        gpus_by_node: dict[str, list[int]] = defaultdict(list)
        for replica in victims.running[job].slots:
            for slot in replica:
                if _whole(slot) and slot.node in free.nodes:
                    gpus_by_node[slot.node].append(slot.gpu)
        for node, gpus in gpus_by_node.items():
            free.give_back(node, gpus)

    def undo() -> None:
        victims.chosen.difference_update(chosen)

    free.on_rollback(undo)


def preemption(snapshot: Snapshot, choose: ChooseNode) -> Rescue:
    """The :data:`~scheduler.sim.baselines.common.Rescue` of one cycle: replicas that fit go where ``choose``
    puts them, each replica that fits nowhere preempts (module rules); the victims are evicted only if every
    replica found room."""
    victims = Victims.of(snapshot)

    def rescue(free: Free, job: Job, candidates: Sequence[tuple[Node, Need]]) -> tuple[Slots, list[str]] | None:
        slots: list[tuple[Slot, ...]] = []
        chosen: list[str] = []
        for _ in range(job.replicas):
            fitting = [(node, need) for node, need in candidates if free.fits(node.name, need)]
            if fitting:
                node, need = choose(free, fitting)
            else:
                found = preempt_for_replica(job, candidates, free, victims)
                if found is None:
                    return None
                node, need, these = found
                free_victims(these, free, victims)
                chosen.extend(these)
            slots.append(free.take_whole(node.name, need.gpus))
        return tuple(slots), chosen

    return rescue


def plan_by_priority(snapshot: Snapshot, policy: Policy, *, name: str, choose: ChooseNode) -> Plan:
    """One cycle of a stock kube-scheduler baseline: the queue in priority order, each replica on the node
    ``choose`` picks, and priority preemption (module rules) for what fits nowhere."""

    def place(free: Free, job: Job, candidates: Sequence[tuple[Node, Need]]) -> Slots | None:
        return place_each(free, job, candidates, choose)

    return plan_fifo(
        snapshot, policy, place, name=name, order=queue_order, rescue=preemption(snapshot, choose), rules=RULES
    )
