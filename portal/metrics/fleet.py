"""The fleet's metrics: GPUs by state, how much of them running work really needs, how busy they are, quotas.

GPU figures are GPU-equivalents: a whole GPU counts 1, a MIG instance its compute slices / 7. A node that is
gone counts nowhere. Each node's capacity is split into what live allocations hold (``allocated``) and the
rest, which is ``reconfiguring`` while the loop last saw a MIG reconfiguration in flight on the node, ``draining`` while
the node is cordoned or draining, and ``idle`` otherwise.

``microcosm_gpu_effective_utilization_ratio`` is the B2 benchmark's ``effective_utilization``
(spec/benchmarks.md) at this instant: what the running work needs over the GPUs present, with the benchmarks'
own definition of a job's true need (:func:`scheduler.core.replica_need`). A job never needs more than it holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta

from prometheus_client.core import GaugeMetricFamily, Metric

from jobs.models import Allocation, Job
from jobs.selectors.jobs import gpu_equivalents
from jobs.selectors.team_usage import team_quota_use
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import core_job
from scheduler.core import replica_need
from scheduler.core.model.vocabulary import NodeState
from scheduler.models import CycleStats, Node, UtilizationSample
from teams.models import Team

GPU_STATES = ("allocated", "idle", "reconfiguring", "draining")
# A node whose last utilization sample is older than this has no known figure (the sampler runs every 30 s).
SAMPLE_FRESH_S = 300.0


def fleet_metrics(now: datetime, stats: CycleStats | None) -> Iterator[Metric]:
    nodes = list(Node.objects.exclude(state=NodeState.GONE).select_related("gpu_model"))
    held = _held_per_node()
    yield _gpus(nodes, held, set((stats.mig_in_flight if stats else {}) or {}))
    yield _effective_utilization(sum(node.gpu_count for node in nodes), {node.pk for node in nodes})
    yield _used(now)
    yield _quotas()


def _held_per_node() -> dict[int, float]:
    held: dict[int, float] = defaultdict(float)
    live = Allocation.objects.filter(ended_at__isnull=True).values_list(
        "node_id", "node__gpu_model__name", "mig_profile"
    )
    for node_id, gpu_model, mig_profile in live:
        held[node_id] += gpu_equivalents(gpu_model, mig_profile)
    return held


def _gpus(nodes: list[Node], held: dict[int, float], reconfiguring: set[str]) -> Metric:
    family = GaugeMetricFamily(
        "microcosm_gpus",
        "GPU-equivalents by GPU model, capacity tier and state.",
        labels=["gpu_model", "tier", "state"],
    )
    totals: dict[tuple[str, str, str], float] = defaultdict(float)
    for node in nodes:
        allocated = min(float(node.gpu_count), held.get(node.pk, 0.0))
        if node.name in reconfiguring:
            rest = "reconfiguring"
        elif node.state in (NodeState.CORDONED, NodeState.DRAINING):
            rest = "draining"
        else:
            rest = "idle"
        for state in GPU_STATES:
            totals[(node.gpu_model.name, node.tier, state)] += 0.0
        totals[(node.gpu_model.name, node.tier, "allocated")] += allocated
        totals[(node.gpu_model.name, node.tier, rest)] += node.gpu_count - allocated
    for (gpu_model, tier, state), gpus in sorted(totals.items()):
        family.add_metric([gpu_model, tier, state], round(gpus, 6))
    return family


def _effective_utilization(capacity: int, present: set[int]) -> Metric:
    family = GaugeMetricFamily(
        "microcosm_gpu_effective_utilization_ratio",
        "What the running work needs over the GPUs present (the B2 benchmark's effective utilization, now).",
    )
    held: dict[int, float] = defaultdict(float)
    models: dict[int, str] = {}
    live = Allocation.objects.filter(ended_at__isnull=True, node_id__in=present).values_list(
        "job_id", "node__gpu_model__name", "mig_profile"
    )
    for job_id, gpu_model, mig_profile in live.order_by("job_id", "replica", "id"):
        held[job_id] += gpu_equivalents(gpu_model, mig_profile)
        models.setdefault(job_id, gpu_model)
    policy = policy_current()
    need = 0.0
    for job in Job.objects.filter(pk__in=list(held)).select_related("team", "project"):
        engine_job = core_job(job)
        need += min(held[job.pk], replica_need(engine_job, models[job.pk], policy) * engine_job.replicas)
    family.add_metric([], round(need / capacity, 6) if capacity else 0.0)
    return family


def _used(now: datetime) -> Metric:
    family = GaugeMetricFamily(
        "microcosm_gpu_used_ratio",
        "How busy the GPUs are (DCGM through PROMETHEUS_URL on Kubernetes), by GPU class, over the nodes sampled.",
        labels=["gpu_class"],
    )
    recent = UtilizationSample.objects.filter(at__gte=now - timedelta(seconds=SAMPLE_FRESH_S)).exclude(
        node__state=NodeState.GONE
    )
    latest: dict[int, tuple[datetime, str, float, float]] = {}
    for node_id, at, gpu_class, gpus, busy in recent.values_list("node_id", "at", "gpu_class", "gpus", "busy_ratio"):
        if node_id not in latest or at > latest[node_id][0]:
            latest[node_id] = (at, gpu_class, gpus, busy)
    capacity: dict[str, float] = defaultdict(float)
    busy_gpus: dict[str, float] = defaultdict(float)
    for _at, gpu_class, gpus, busy in latest.values():
        capacity[gpu_class] += gpus
        busy_gpus[gpu_class] += gpus * busy
    for gpu_class in sorted(capacity):
        if capacity[gpu_class] > 0:
            family.add_metric([gpu_class], round(busy_gpus[gpu_class] / capacity[gpu_class], 6))
    return family


def _quotas() -> Metric:
    family = GaugeMetricFamily(
        "microcosm_team_quota_gpus",
        "Each team's guarantee, burst limit, GPU-equivalents in use and borrowed (above the guarantee), per GPU "
        "class ('any': all classes).",
        labels=["team", "gpu_class", "kind"],
    )
    for team in Team.objects.order_by("slug"):
        for row in team_quota_use(team=team):
            figures = {
                "guaranteed": row.guaranteed_gpus,
                "burst": row.burst_gpus,
                "in_use": row.in_use_gpus,
                "borrowed": row.borrowed_gpus,
            }
            for kind, value in figures.items():
                if value is not None:
                    family.add_metric([team.slug, row.gpu_class, kind], float(value))
    return family
