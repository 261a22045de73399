"""The demo's billing history: prices, commitments, and past work (last month and this one) in the ledger.

Called by :func:`demo.seed.demo_seed` after the org and fleet exist, so the finance pages have figures right
after ``make demo``. Idempotent: prices and commitments are added when missing, and the history is made once
(its jobs are named ``history-…``). Past work is generated from a fixed seed on the demo fleet without
double-booking a GPU, then closed by the real ledger service.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction

from billing.intervals import floor_hour
from billing.models import ReservedCommitment
from billing.periods import add_months, month_start
from billing.services import CloseSummary, ledger_close_due, price_catalog_seed
from jobs.models import Allocation, Job, JobEvent
from scheduler.core.model.vocabulary import CapacityTier, EventType, EvictionReason, JobKind, JobState
from scheduler.models import Gpu, GpuModel, Node
from teams.models import Project, Team

HISTORY_PREFIX = "history-"
_SEED = 2026
_HOURS_PER_MONTH = Decimal(730)
_HOUR = timedelta(hours=1)
# Draws per pool and hour before the history gives up filling it: a drawn tier may have no node with room.
_ATTEMPTS_PER_HOUR = 40  # docs/gpu-facts.md's month (Ownership inputs and break-even)
# Reserved commitments for the demo fleet's reserved nodes, priced at the catalog's reserved rate × 730 h.
# A100-PCIE-40GB is committed for 12 GPUs while only 8 are registered: one 4-GPU server was returned early,
# so finance sees an unused-commitment line.
_COMMITMENTS = (
    ("demo-a100-80-1yr", "A100-SXM4-80GB", 16, 12, Decimal("2.2295")),
    ("demo-h100-1yr", "H100-SXM5-80GB", 16, 12, Decimal("4.4720")),
    ("demo-a100-40-1yr", "A100-PCIE-40GB", 12, 12, Decimal("1.7810")),
)


@dataclass
class _Slot:
    node: Node
    index: int
    mig_profile: str
    mig_start: int | None
    free_at: datetime

    @property
    def size(self) -> int:
        """Compute slices of a MIG instance (its profile's leading digit), 7 for a whole GPU."""
        return int(self.mig_profile.split("g.")[0]) if self.mig_profile else 7


def billing_demo_seed(*, now: datetime, history: bool = True) -> CloseSummary | None:
    """Seed prices, commitments and (``history``) the history, once; close the ledger. None when no history was
    made (it existed, or was not asked for)."""
    history_start = month_start(add_months(now.date(), -1))
    price_catalog_seed()
    with transaction.atomic():
        models = {model.name: model for model in GpuModel.objects.all()}
        for name, model, gpus, term, rate in _COMMITMENTS:
            if model in models:
                ReservedCommitment.objects.get_or_create(
                    name=name,
                    defaults={
                        "gpu_model": models[model],
                        "gpu_count": gpus,
                        "term_months": term,
                        "monthly_price": (rate * gpus * _HOURS_PER_MONTH).quantize(Decimal("0.01")),
                        "start": history_start.date(),
                        "note": "demo: catalog reserved rate × GPUs × 730 h",
                    },
                )
        if not history or Job.objects.filter(name__startswith=HISTORY_PREFIX).exists():
            return None
        # The demo fleet "has been running" since the history starts: capacity is paid from then on.
        Node.objects.filter(created_at__gt=history_start).update(created_at=history_start)
        _history_create(start=history_start, end=floor_hour(now) - timedelta(hours=2))
        # One transaction for the whole close (each allocation's close is a savepoint inside it): the demo
        # seed then costs one disk sync instead of one per allocation.
        return ledger_close_due(now=now)


def _history_create(*, start: datetime, end: datetime) -> None:
    """Past work from ``start`` to ``end``, kept near :func:`target_utilization` of the fleet (module doc)."""
    rng = random.Random(_SEED)
    teams = list(Team.objects.order_by("slug"))
    weights = [team.weight for team in teams]
    projects = {team.pk: list(Project.objects.filter(team=team).order_by("code")) for team in teams}
    slots = [
        _Slot(gpu.node, gpu.index, "", None, start)
        for gpu in Gpu.objects.select_related("node").filter(mig_layout=[]).order_by("node__name", "index")
    ]
    mig_slots = [
        _Slot(gpu.node, gpu.index, profile, mig_start, start)
        for gpu in Gpu.objects.select_related("node").exclude(mig_layout=[]).order_by("node__name", "index")
        for profile, mig_start in gpu.mig_layout
    ]
    counter = 0
    t = start
    made: list[tuple[Job, list[JobEvent], list[Allocation]]] = []
    while t < end:
        target = target_utilization(t)
        # Whole GPUs (training and batch), then MIG slices (inference): each filled up to the hour's target.
        for pool, make in ((slots, _whole_gpu_job), (mig_slots, _inference_job)):
            attempts = 0
            while _busy(pool, t) < target and attempts < _ATTEMPTS_PER_HOUR:
                attempts += 1
                team = rng.choices(teams, weights=weights)[0]
                counter += 1
                created = make(rng, team, projects[team.pk], pool, t, end, counter)
                if created is not None:
                    made.append(created)
        t += _HOUR
    # Three inserts for the whole history: the jobs first, so events and allocations can point at them.
    Job.objects.bulk_create([job for job, _, _ in made], batch_size=500)
    for job, events, allocations in made:
        for event in events:
            event.job = job
        for allocation in allocations:
            allocation.job = job
    JobEvent.objects.bulk_create([event for _, events, _ in made for event in events], batch_size=500)
    Allocation.objects.bulk_create([a for _, _, allocations in made for a in allocations], batch_size=500)


def target_utilization(at: datetime) -> float:
    """The share of the fleet the history keeps allocated at ``at``: busier on working days (UTC), as a shared
    research cluster is. Averages about 72 %: OpenCost's and Kubecost's demo clusters show teams' usage well
    above idle capacity, and GPU fleets bought for training run in that range, not at a few percent."""
    if at.weekday() >= 5:
        return 0.58
    return 0.80 if 8 <= at.hour < 20 else 0.72


def _busy(pool: list[_Slot], at: datetime) -> float:
    """The share of ``pool`` (GPUs weighted by their compute slices for MIG) that is held at ``at``."""
    total = sum(slot.size for slot in pool)
    return sum(slot.size for slot in pool if slot.free_at > at) / total if total else 1.0


def _whole_gpu_job(
    rng: random.Random,
    team: Team,
    projects: list[Project],
    slots: list[_Slot],
    t: datetime,
    end: datetime,
    counter: int,
) -> tuple[Job, list[JobEvent], list[Allocation]] | None:
    """Training (1–8 whole GPUs of one node, hours to a day and a half) or batch work (1–2 GPUs, a few hours);
    preemptible training goes to spot. None when no node of the drawn tier has enough free GPUs."""
    kind = rng.choices([JobKind.TRAINING, JobKind.BATCH], weights=[7, 3])[0]
    started = t + timedelta(minutes=rng.randint(0, 50), seconds=rng.randint(0, 59))
    if kind == JobKind.TRAINING:
        tier = rng.choices([CapacityTier.RESERVED, CapacityTier.SPOT, CapacityTier.ON_DEMAND], weights=[5, 3, 2])[0]
        gpus = rng.choices([1, 2, 4, 8], weights=[2, 3, 3, 2])[0]
        duration = timedelta(hours=rng.randint(6, 36))
    else:
        tier = rng.choices([CapacityTier.RESERVED, CapacityTier.ON_DEMAND, CapacityTier.SPOT], weights=[3, 2, 2])[0]
        gpus = rng.choice([1, 2])
        duration = timedelta(hours=rng.randint(2, 8))
    by_node: dict[int, list[_Slot]] = {}
    for slot in slots:
        if slot.node.tier == tier and slot.free_at <= started:
            by_node.setdefault(slot.node.pk, []).append(slot)
    fitting = [free for free in by_node.values() if len(free) >= gpus]
    if not fitting:
        return None
    chosen = rng.choice(fitting)[:gpus]
    preemptible = tier == CapacityTier.SPOT
    return _job_create(rng, team, projects, chosen, kind, {"gpus": gpus}, preemptible, started, duration, end, counter)


def _inference_job(
    rng: random.Random,
    team: Team,
    projects: list[Project],
    mig_slots: list[_Slot],
    t: datetime,
    end: datetime,
    counter: int,
) -> tuple[Job, list[JobEvent], list[Allocation]] | None:
    """A model served on one MIG slice for half a day to two days; None when no slice is free."""
    started = t + timedelta(minutes=rng.randint(0, 50), seconds=rng.randint(0, 59))
    free = [slot for slot in mig_slots if slot.free_at <= started]
    if not free:
        return None
    chosen = [rng.choice(free)]
    duration = timedelta(hours=rng.randint(12, 48))
    request: dict[str, object] = {"mig_profile": chosen[0].mig_profile}
    return _job_create(rng, team, projects, chosen, JobKind.INFERENCE, request, False, started, duration, end, counter)


def _job_create(
    rng: random.Random,
    team: Team,
    projects: list[Project],
    chosen: list[_Slot],
    kind: JobKind,
    request: dict[str, object],
    preemptible: bool,
    started: datetime,
    duration: timedelta,
    end: datetime,
    counter: int,
) -> tuple[Job, list[JobEvent], list[Allocation]] | None:
    """The unsaved job on ``chosen`` from ``started``, its events and its allocations; a preemptible job may be
    cut short by a spot interruption. None when it would end before it starts."""
    project = _project_for(rng, kind, projects)
    submitted = started - timedelta(minutes=rng.randint(1, 50))
    ended = min(started + duration, end)
    if ended <= started:
        return None
    preempted = preemptible and rng.random() < 0.25 and ended - started > timedelta(hours=2)
    if preempted:
        ended = started + (ended - started) * rng.uniform(0.3, 0.9)
    state = JobState.FAILED if preempted else JobState.COMPLETED
    job = Job(
        team=team,
        project=project,
        name=f"{HISTORY_PREFIX}{kind}-{counter:05d}",
        kind=kind,
        preemptible=preemptible,
        checkpoint_interval_s=1800 if preemptible else None,
        submitted_at=submitted,
        started_at=started,
        finished_at=ended,
        state=state,
        state_reason="demo history" + (": preempted by a spot interruption" if preempted else ""),
        **request,
    )
    events = [
        JobEvent(job=job, type=EventType.SUBMITTED, at=submitted),
        JobEvent(job=job, type=EventType.BOUND, at=started, details={"node": chosen[0].node.name}),
    ]
    if preemptible:
        last = started + timedelta(seconds=1800 * int((ended - started).total_seconds() // 1800))
        for checkpoint in (last - timedelta(seconds=1800), last):
            if started < checkpoint < ended:
                events.append(JobEvent(job=job, type=EventType.CHECKPOINTED, at=checkpoint))
    events.append(
        JobEvent(
            job=job,
            type=EventType.PREEMPTED if preempted else EventType.COMPLETED,
            at=ended,
            details={"reason": EvictionReason.NODE_LOST.value} if preempted else {},
        )
    )
    allocations = [
        Allocation(
            job=job,
            replica=0,
            node=slot.node,
            gpu_index=slot.index,
            mig_profile=slot.mig_profile,
            mig_start=slot.mig_start,
            tier=slot.node.tier,
            price_per_gpu_hour=slot.node.price_per_gpu_hour,
            started_at=started,
            ended_at=ended,
            end_reason=EvictionReason.NODE_LOST.value if preempted else "completed",
        )
        for slot in chosen
    ]
    for slot in chosen:
        slot.free_at = ended
    return job, events, allocations


def _project_for(rng: random.Random, kind: JobKind, projects: list[Project]) -> Project | None:
    """A project whose name fits the work: serving projects take inference, the others training and batch."""
    serving = [p for p in projects if p.code.endswith("-serving")]
    other = [p for p in projects if not p.code.endswith("-serving")]
    fitting = serving if kind == JobKind.INFERENCE else other
    pool = fitting or projects
    return rng.choice(pool) if pool else None
