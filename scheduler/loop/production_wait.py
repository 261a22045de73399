"""Record, in the cycle's record transaction, what production waited for although production preempts lower work:
one ``billing.ProductionWait`` row per GPU class and cause (and, for ``burst``, team) — none in a cycle where no
production waits — so the procurement advisor can say "production waited N h this week on H100: reserve M more
GPUs, or raise team X's burst" (docs/billing.md, Procurement advisor).

The source is the plan's own verdict on each waiting production job, its blocker (``Waiting.blocker``): the engine
has already tried every step production may take (lower work of any team evicted, a reconfiguration without the
hysteresis) before it says what blocked the job, so no second judgement runs in the loop. The blockers map to the
simulator's causes of unavoidable wait (``bench causes``, whose oracle ``scheduler/sim/avoidable.py`` the loop may
not import):

- ``quota`` → ``burst``: production may exceed its team's guarantee, so its quota refuses it only at the burst
  limit;
- ``capacity``, ``reserved`` (GPUs are reserved for it from the expected ends of work production may not evict)
  and ``not-ready`` (no node that could run it takes new work) → ``held``;
- ``reconfiguring`` and ``held`` (a MIG reconfiguration under way or due next cycle) are not counted: production
  is already being given room, and the wait is the reconfiguration's time, not missing capacity.

The engine's ``capacity`` verdict also covers waits the simulator's oracle calls avoidable (a MIG-split GPU not
reconfigured, GPUs free but scattered over nodes), and buying GPUs would not end those. So a ``held`` row also
says how far production's demand on the class exceeded the class's capacity (``short_units``): what production
holds there now (its live allocations, this cycle's binds included) plus what waited, less the GPUs of the
class's nodes that take new work on a tier the waiting jobs may use. The advice reserves GPUs from that figure
only; a wait with room on the class is reported, not bought for.

The GPU class is the one class the job can use on this fleet (a job several classes can serve is counted on
those classes joined by ``/``, at the fewest GPU-equivalents any of them needs; one no node serves, on the class
it names, or ``any``). Each row lasts one cycle period (``SCHEDULER["cycle_s"]``), as the simulator counts one
cycle of wait per waiting cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from billing.models import PRODUCTION_WAIT_KEPT_DAYS, ProductionWait, WaitCause
from jobs.models import Allocation, Job
from scheduler.bridge.policy import policy_at_speed
from scheduler.bridge.snapshot import core_job
from scheduler.core import Job as CoreJob
from scheduler.core import Plan, Policy, resolve
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import UNITS_PER_GPU, UNITS_PER_SLICE
from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.explain import demand_units
from scheduler.core.model.vocabulary import BlockerKind, JobState, Priority
from scheduler.core.rules.tiers import allowed_tiers
from scheduler.gateways.protocol import Observation

CAUSE_OF_BLOCKER: dict[BlockerKind, str] = {
    BlockerKind.QUOTA: WaitCause.BURST,
    BlockerKind.CAPACITY: WaitCause.HELD,
    BlockerKind.RESERVED: WaitCause.HELD,
    BlockerKind.NOT_READY: WaitCause.HELD,
}
ANY = "any"


@dataclass
class _Waited:
    units: int = 0
    jobs: int = 0
    tiers: set[str] = field(default_factory=set)


def production_wait_record(plan: Plan, jobs: Mapping[str, Job], observation: Observation, at: datetime) -> int:
    """Inside the record transaction: write this cycle's production wait (module doc); the rows written."""
    waited: dict[tuple[str, str, int | None], _Waited] = {}  # (class, cause, team) → what waited
    policy: Policy | None = None
    for waiting in plan.waiting:
        job = jobs.get(waiting.job)
        cause = CAUSE_OF_BLOCKER.get(waiting.blocker) if waiting.blocker is not None else None
        if cause is None or job is None or job.state != JobState.PENDING or job.priority != Priority.PRODUCTION:
            continue
        policy = policy or policy_at_speed(observation.clock_speed)
        engine_job = core_job(job, observation.clock_speed)
        tiers = {str(tier) for tier in allowed_tiers(engine_job)}
        gpu_class, units = _need(engine_job, observation, tiers, policy)
        total = waited.setdefault((gpu_class, cause, job.team_id if cause == WaitCause.BURST else None), _Waited())
        total.units += units
        total.jobs += 1
        total.tiers |= tiers
    if not waited:
        return 0
    held = _production_held(observation)
    seconds = float(settings.SCHEDULER["cycle_s"])
    rows = []
    for (gpu_class, cause, team), total in sorted(waited.items(), key=str):
        short = 0
        if cause == WaitCause.HELD:
            classes = set(gpu_class.split("/"))
            capacity = sum(
                node.gpu_count * UNITS_PER_GPU
                for node in observation.nodes
                if node.schedulable and node.tier in total.tiers and gpu_class_of(node.gpu_model) in classes
            )
            short = max(0, sum(held.get(c, 0) for c in classes) + total.units - capacity)
        rows.append(
            ProductionWait(
                at=at,
                gpu_class=gpu_class,
                cause=cause,
                team_id=team,
                gpu_units=total.units,
                short_units=short,
                jobs=total.jobs,
                seconds=seconds,
            )
        )
    ProductionWait.objects.bulk_create(rows)
    # Only a cycle that writes deletes (one indexed query): the table grows only while production waits.
    ProductionWait.objects.filter(at__lt=at - timedelta(days=PRODUCTION_WAIT_KEPT_DAYS)).delete()
    return len(rows)


def _need(job: CoreJob, observation: Observation, tiers: set[str], policy: Policy) -> tuple[str, int]:
    """The GPU class ``job`` waits for on this fleet and the units (1/7000 GPU) it needs there (module doc)."""
    need: dict[str, int] = {}
    for model in sorted({node.gpu_model for node in observation.nodes if node.tier in tiers}):
        demand = resolve(job, model, policy)
        if demand is not None:
            units = demand_units(demand, model) * job.replicas
            gpu_class = gpu_class_of(model)
            need[gpu_class] = min(units, need.get(gpu_class, units))
    if not need:
        return (gpu_class_of(job.gpu_model) if job.gpu_model else ANY), 0
    return "/".join(sorted(need)), min(need.values())


def _production_held(observation: Observation) -> dict[str, int]:
    """Units production holds per GPU class on the nodes that take new work (its live allocations)."""
    open_nodes = {node.name for node in observation.nodes if node.schedulable}
    held: dict[str, int] = {}
    live = Allocation.objects.filter(ended_at__isnull=True, job__priority=Priority.PRODUCTION)
    for node, model, profile in live.values_list("node__name", "node__gpu_model__name", "mig_profile"):
        if node not in open_nodes:
            continue
        spec = GPU_MODEL_BY_NAME.get(model)
        units = spec.profiles()[profile].compute_slices * UNITS_PER_SLICE if profile and spec else UNITS_PER_GPU
        held[gpu_class_of(model)] = held.get(gpu_class_of(model), 0) + units
    return held
