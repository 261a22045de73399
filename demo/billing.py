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
from scheduler.core.vocabulary import CapacityTier, EventType, EvictionReason, JobKind, JobState
from scheduler.models import Gpu, GpuModel, Node
from teams.models import Project, Team

HISTORY_PREFIX = "history-"
_SEED = 2026
_HOURS_PER_MONTH = Decimal(730)  # docs/gpu-facts.md's month (Ownership inputs and break-even)
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


def billing_demo_seed(*, now: datetime) -> CloseSummary | None:
    """Seed prices, commitments and the history (once); close the ledger. None when the history existed."""
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
        if Job.objects.filter(name__startswith=HISTORY_PREFIX).exists():
            return None
        # The demo fleet "has been running" since the history starts: capacity is paid from then on.
        Node.objects.filter(created_at__gt=history_start).update(created_at=history_start)
        _history_create(start=history_start, end=floor_hour(now) - timedelta(hours=2))
        # One transaction for the whole close (each allocation's close is a savepoint inside it): the demo
        # seed then costs one disk sync instead of one per allocation.
        return ledger_close_due(now=now)


def _history_create(*, start: datetime, end: datetime) -> None:
    rng = random.Random(_SEED)
    teams = list(Team.objects.order_by("slug"))
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
        for team in teams:
            if rng.random() < 0.25:
                counter += 1
                created = _job_create(rng, team, projects[team.pk], slots, mig_slots, t, end, counter)
                if created is not None:
                    made.append(created)
        t += timedelta(hours=24)
    # Three inserts for the whole history: the jobs first, so events and allocations can point at them.
    Job.objects.bulk_create([job for job, _, _ in made])
    for job, events, allocations in made:
        for event in events:
            event.job = job
        for allocation in allocations:
            allocation.job = job
    JobEvent.objects.bulk_create([event for _, events, _ in made for event in events])
    Allocation.objects.bulk_create([allocation for _, _, allocations in made for allocation in allocations])


def _job_create(
    rng: random.Random,
    team: Team,
    projects: list[Project],
    slots: list[_Slot],
    mig_slots: list[_Slot],
    t: datetime,
    end: datetime,
    counter: int,
) -> tuple[Job, list[JobEvent], list[Allocation]] | None:
    """Maybe start one job of ``team`` at ``t`` on free GPUs (None when none fit): the unsaved job, its events
    and its allocations."""
    kind = rng.choices([JobKind.TRAINING, JobKind.INFERENCE, JobKind.BATCH], weights=[5, 3, 2])[0]
    project = rng.choice(projects) if projects else None
    submitted = t - timedelta(minutes=rng.randint(1, 50))
    started = t + timedelta(minutes=rng.randint(0, 50), seconds=rng.randint(0, 59))
    request: dict[str, object]
    if kind == JobKind.INFERENCE:
        free = [s for s in mig_slots if s.free_at <= started]
        if not free:
            return None
        chosen = [rng.choice(free)]
        duration = timedelta(hours=rng.randint(4, 16))
        request = {"mig_profile": chosen[0].mig_profile}
        tier = chosen[0].node.tier
    else:
        tier = rng.choices([CapacityTier.RESERVED, CapacityTier.SPOT, CapacityTier.ON_DEMAND], weights=[5, 3, 2])[0]
        gpus = rng.choice([1, 1, 2, 4]) if kind == JobKind.TRAINING and tier != CapacityTier.SPOT else 1
        by_node: dict[int, list[_Slot]] = {}
        for slot in slots:
            if slot.node.tier == tier and slot.free_at <= started:
                by_node.setdefault(slot.node.pk, []).append(slot)
        fitting = [free for free in by_node.values() if len(free) >= gpus]
        if not fitting:
            return None
        chosen = rng.choice(fitting)[:gpus]
        duration = timedelta(hours=rng.randint(2, 6) if kind == JobKind.BATCH else rng.randint(3, 12))
        request = {"gpus": gpus}
    preemptible = kind == JobKind.TRAINING and tier == CapacityTier.SPOT
    ended = min(started + duration, end)
    if ended <= started:
        return None
    preempted = preemptible and rng.random() < 0.35 and ended - started > timedelta(hours=2)
    if preempted:
        ended = started + (ended - started) * rng.uniform(0.3, 0.9)
    state = JobState.FAILED if preempted else JobState.COMPLETED
    job = Job(
        team=team,
        project=project,
        name=f"{HISTORY_PREFIX}{kind}-{counter:04d}",
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
