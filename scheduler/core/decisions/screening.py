"""Screening: which pending jobs a cycle takes, and why it rejects the others, before it places anything.

A job is rejected, with a reason, when it is outside the bounds every edge enforces (:func:`bounds.job_problems`;
nothing else of it is judged then), when no GPU model of the cluster can serve its request
(:func:`rightsize.unplaceable_reason`: memory, MIG profile, a ``gpu_model`` constraint matching no node), or when
its gang is larger than the whole cluster could hold on the nodes its tier and model allow
(:func:`placement.gang.cluster_capacity`, counting the nodes autoscaled pools could still add; a gang of replicas
smaller than a GPUDirect-TCPX/TCPXO node is told so: it may span such nodes only with whole-node replicas,
:mod:`placement.fabric` rule 4). A submit asks the same question before it writes anything
(:func:`rejection_reason`), so a job that could never run is refused with the engine's own words.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.model.demand import DemandKind
from scheduler.core.model.explain import need_text
from scheduler.core.model.isolation import JobFailed
from scheduler.core.model.plan import Reject
from scheduler.core.model.policy import Policy
from scheduler.core.model.provisioning import Offering
from scheduler.core.model.shape import placement_shape
from scheduler.core.model.snapshot import Job, Node, Snapshot
from scheduler.core.model.vocabulary import CapacityTier
from scheduler.core.placement import IndexedClusterState
from scheduler.core.placement.gang import NodeKind, astuple_key, cluster_capacity, node_kinds, single_node_only
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.core.sizing.bounds import job_problems
from scheduler.core.sizing.rightsize import resolve, unplaceable_reason

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeCensus:
    """The nodes as a rejection reads them: their kinds with counts and their GPU models. Built once for many
    jobs (a cycle's queue, a bulk submit): a few kinds stand for thousands of nodes."""

    kinds: tuple[tuple[NodeKind, int], ...]
    models: tuple[str, ...]

    @classmethod
    def of(cls, nodes: Sequence[Node], offerings: Sequence[Offering] = ()) -> NodeCensus:
        """The census of ``nodes`` and of the nodes autoscaled pools could still add (each offering's ceiling less
        the pool's nodes): a job only a pool can serve is not one that can never run."""
        pooled = Counter(node.pool for node in nodes if node.pool)
        return cls._merged(node_kinds(nodes), pooled, offerings)

    @classmethod
    def of_counts(
        cls,
        counts: Iterable[tuple[str, int, str, str, int]],
        pooled: Mapping[str, int],
        offerings: Sequence[Offering] = (),
    ) -> NodeCensus:
        """:meth:`of` from nodes already counted (a database's GROUP BY): ``counts`` rows of (GPU model, GPUs per
        node, tier, fabric, how many nodes) of nodes that neither time-slice their GPUs nor state host limits;
        ``pooled`` how many of them each autoscaled pool holds."""
        kinds = [(NodeKind(model, gpus, tier, False, None, None, fabric), n) for model, gpus, tier, fabric, n in counts]
        return cls._merged(kinds, pooled, offerings)

    @classmethod
    def _merged(
        cls, kinds: Iterable[tuple[NodeKind, int]], pooled: Mapping[str, int], offerings: Sequence[Offering]
    ) -> NodeCensus:
        counts: dict[NodeKind, int] = {}
        for kind, count in kinds:
            counts[kind] = counts.get(kind, 0) + count
        for offering in offerings:
            room = offering.max_nodes - pooled.get(offering.pool, 0)
            if room > 0:
                kind = NodeKind(
                    offering.gpu_model,
                    offering.gpu_count,
                    str(CapacityTier.ON_DEMAND),
                    False,
                    None,
                    None,
                    str(offering.fabric),
                )
                counts[kind] = counts.get(kind, 0) + room
        ordered = tuple(sorted(counts.items(), key=lambda item: astuple_key(item[0])))
        models = {kind.gpu_model for kind in counts}
        return cls(ordered, tuple(sorted(models)))

    def __bool__(self) -> bool:  # as the nodes it counts: an empty inventory is falsy
        return bool(self.kinds)


def screen(snapshot: Snapshot, state: IndexedClusterState, policy: Policy) -> tuple[list[Job], list[Reject]]:
    """Pending jobs that could ever run (deduplicated, sorted by id) and the rejections of the others."""
    census = NodeCensus.of(snapshot.nodes, snapshot.provisioning.offerings)
    seen: set[str] = set(state.placed)
    keep: list[Job] = []
    rejections: list[Reject] = []
    reasons: dict[Hashable, str | None] = {}
    by_id: dict[str, list[Job]] = {}
    for job in snapshot.pending:
        by_id.setdefault(job.id, []).append(job)
    for job_id in sorted(by_id):
        copies = by_id[job_id]
        job = copies[0] if len(copies) == 1 else min(copies, key=lambda j: (j.submitted_at, j.rank, repr(j)))
        if job.id in seen:
            continue
        seen.add(job.id)
        problems = job_problems(job)
        if problems:  # outside the bounds every edge enforces: judge nothing more (scheduler.core.sizing.bounds)
            rejections.append(Reject(job=job.id, reason=_invalid(problems)))
            continue
        shape = placement_shape(job)
        if shape not in reasons:
            try:
                reasons[shape] = never_runs_reason(job, census.kinds, census.models, policy)
            except Exception as error:  # isolation: this shape's judgement failed, the others' did not
                failure = JobFailed(job.id, error)
                log.error("job %s: %s; rejected", job.id, failure.reason, exc_info=error)
                reasons[shape] = failure.reason
        reason = reasons[shape]
        if reason is None:
            keep.append(job)
        else:
            rejections.append(Reject(job=job.id, reason=reason))
    return keep, rejections


def rejection_reason(job: Job, nodes: Sequence[Node] | NodeCensus, policy: Policy) -> str | None:
    """The reason a cycle on a cluster of ``nodes`` would reject ``job`` (step 2), or None when it would take
    it. What a submit asks before it writes anything, so a job that could never run is refused with the
    engine's own words. Asking for many jobs, pass the nodes' :class:`NodeCensus`, built once."""
    problems = job_problems(job)
    if problems:
        return _invalid(problems)
    census = nodes if isinstance(nodes, NodeCensus) else NodeCensus.of(nodes)
    return never_runs_reason(job, census.kinds, census.models, policy)


def _invalid(problems: Sequence[tuple[str, str]]) -> str:
    return "invalid request: " + "; ".join(f"{key} {why}" for key, why in problems)


def never_runs_reason(
    job: Job, kinds: Sequence[tuple[NodeKind, int]], models: Sequence[str], policy: Policy
) -> str | None:
    """Why ``job`` can never run on a cluster of these node kinds and GPU models, or None (module doc, step 2).
    The reason depends only on the job's shape, never on its id."""
    reason = unplaceable_reason(job, models, policy)
    if reason is not None:
        return reason
    capacity = cluster_capacity(kinds, job, policy)
    if capacity >= job.replicas:
        return None
    tiers = {str(t) for t in allowed_tiers(job)}
    usable = [k for k, _ in kinds if k.tier in tiers and resolve(job, k.gpu_model, policy) is not None]
    if not usable:
        names = " or ".join(str(t) for t in allowed_tiers(job))
        return f"may run only on {names} capacity, and the cluster has no such node with GPUs it can use"
    demand = resolve(job, usable[0].gpu_model, policy)
    assert demand is not None
    per_replica = need_text(Job(id=job.id, team=job.team, request=job.request, gpu_model=job.gpu_model), demand, [])
    whole_nodes = sorted({k.gpu_count for k in usable if single_node_only(k, demand.gpus, demand.kind)})
    if whole_nodes:
        sizes = " or ".join(str(n) for n in whole_nodes)
        return (
            f"needs {job.replicas} replicas of {per_replica} at once; the cluster can hold at most {capacity}: on "
            f"GPUDirect-TCPX/TCPXO nodes each replica of a job spanning nodes must take all {sizes} GPUs of its node "
            "(one workload per node uses its NICs), so ask for replicas of a whole node"
        )
    if capacity == 0:
        if demand.kind == DemandKind.SHARE and not any(k.sharing for k in usable):
            return f"asks for {per_replica}, but no node in the cluster time-slices its GPUs"
        if job.cpu_milli or job.memory_mib:
            return (
                f"needs {job.cpu_milli} milli-CPU and {job.memory_mib} MiB of host memory per replica; "
                "no node that has its GPUs has that much"
            )
        return f"no node in the cluster can hold one replica ({per_replica})"
    return (
        f"needs {job.replicas} replicas of {per_replica} at once; the cluster can hold at most {capacity} "
        "on the nodes it may use"
    )
