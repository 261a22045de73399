"""What production waited for at a cycle although production preempts lower work: one ``billing.ProductionWait``
row per GPU class and cause (and, for ``burst``, team) — none in a cycle where no production waits — so the
procurement advisor can say "production waited N h this week on H100: reserve M more GPUs, or raise team X's burst"
(docs/billing.md, Procurement advisor). This module decides the rows; the billing service
:func:`billing.services.production_waits.production_wait_record` writes them, in the cycle's record transaction
(:mod:`scheduler.loop.record`).

The source is the plan's own verdict on each waiting production job, its blocker (``Waiting.blocker``): the engine
has already tried every step production may take (lower work of any team evicted, a reconfiguration without the
hysteresis) before it says what blocked the job, so no second judgement runs in the loop. The blockers map to the
simulator's causes of unavoidable wait (``bench causes``, whose oracle ``scheduler/sim/avoidable.py`` the loop may
not import):

- ``quota`` → ``burst``: production may exceed its team's guarantee, so its quota refuses it only at the burst
  limit. The row names that limit (``scope``: the one on the class, else the team's overall one — the first
  that the team's production, held plus waiting, exceeds) and that need (``need_units``): the limit that would
  have let it run;
- ``capacity``, ``reserved`` (no room now: GPUs are reserved for it from the running work's expected ends) and
  ``not-ready`` (no node that could run it takes new work) → ``held``;
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
from dataclasses import dataclass, field, replace

from django.conf import settings

from billing.models import WaitCause
from billing.services.production_waits import ProductionWaitRow
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
from teams.models import Quota

CAUSE_OF_BLOCKER: dict[BlockerKind, str] = {
    BlockerKind.QUOTA: WaitCause.BURST,
    BlockerKind.CAPACITY: WaitCause.HELD,
    BlockerKind.RESERVED: WaitCause.HELD,
    BlockerKind.NOT_READY: WaitCause.HELD,
    BlockerKind.PROVISIONING: WaitCause.HELD,  # capacity it lacked, asked of an autoscaled pool
}
ANY = "any"


@dataclass
class _Waited:
    units: int = 0
    jobs: int = 0
    tiers: set[str] = field(default_factory=set)


def production_wait_seconds() -> float:
    """How long each row's wait lasts: one cycle period (module doc)."""
    return float(settings.SCHEDULER["cycle_s"])


def production_wait_rows(plan: Plan, jobs: Mapping[str, Job], observation: Observation) -> list[ProductionWaitRow]:
    """This cycle's production wait (module doc), from ``plan``'s waiting jobs found pending in ``jobs`` (a job
    missing from ``jobs`` is not counted); none when no production waits."""
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
        return []
    held = _ProductionHeld(observation)
    limits = _burst_limits({team for _, cause, team in waited if team is not None})
    rows = []
    for (gpu_class, cause, team), total in sorted(waited.items(), key=str):
        classes = set(gpu_class.split("/"))
        row = ProductionWaitRow(gpu_class=gpu_class, cause=cause, team_id=team, gpu_units=total.units, jobs=total.jobs)
        if team is None:
            capacity = sum(
                node.gpu_count * UNITS_PER_GPU
                for node in observation.nodes
                if node.schedulable and node.tier in total.tiers and gpu_class_of(node.gpu_model) in classes
            )
            short = max(0, sum(held.open_nodes.get(c, 0) for c in classes) + total.units - capacity)
            row = replace(row, short_units=short)
        else:
            scope, need = _refusing_limit(team, classes, total.units, held, limits)
            row = replace(row, scope=scope, need_units=need)
        rows.append(row)
    return rows


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


class _ProductionHeld:
    """What production holds now (its live allocations, this cycle's binds included), in units: per GPU class on
    the nodes that take new work (``open_nodes``), and per team on every node, per class and overall (``ANY``), as
    its burst limits count it."""

    def __init__(self, observation: Observation) -> None:
        schedulable = {node.name for node in observation.nodes if node.schedulable}
        self.open_nodes: dict[str, int] = {}
        self.by_team: dict[tuple[int, str], int] = {}
        live = Allocation.objects.filter(ended_at__isnull=True, job__priority=Priority.PRODUCTION)
        rows = live.values_list("job__team_id", "node__name", "node__gpu_model__name", "mig_profile")
        for team, node, model, profile in rows:
            spec = GPU_MODEL_BY_NAME.get(model)
            units = spec.profiles()[profile].compute_slices * UNITS_PER_SLICE if profile and spec else UNITS_PER_GPU
            gpu_class = gpu_class_of(model)
            if node in schedulable:
                self.open_nodes[gpu_class] = self.open_nodes.get(gpu_class, 0) + units
            for scope in (gpu_class, ANY):
                self.by_team[(team, scope)] = self.by_team.get((team, scope), 0) + units


def _burst_limits(teams: set[int]) -> dict[tuple[int, str], int]:
    """(team, class or ``any``) → its burst limit in units (never below its guarantee, as admission counts it)."""
    rows = Quota.objects.filter(team_id__in=teams).values_list("team_id", "gpu_class", "burst_gpus", "guaranteed_gpus")
    return {(team, c): round(max(burst, guaranteed) * UNITS_PER_GPU) for team, c, burst, guaranteed in rows}


def _refusing_limit(
    team: int, classes: set[str], waited: int, held: _ProductionHeld, limits: Mapping[tuple[int, str], int]
) -> tuple[str, int]:
    """The limit that refused ``team``'s waiting production (its class's, else its overall one: the first that
    what it holds plus what waited exceeds) and that need; the class's, or overall, when none is exceeded now."""
    scopes = [*sorted(classes), ANY] if len(classes) == 1 else [ANY]
    needs = {scope: held.by_team.get((team, scope), 0) + waited for scope in scopes}
    for scope in scopes:
        if (team, scope) in limits and needs[scope] > limits[(team, scope)]:
            return scope, needs[scope]
    scope = next((scope for scope in scopes if (team, scope) in limits), scopes[0])
    return scope, needs[scope]
