"""The checkpoint interval Microcosm proposes: for a job (its page) and for a spec being typed (the submit form).

The rule is the engine's (:func:`scheduler.core.checkpoint_interval`, Young's √(2 × cost × MTBF)); this module
gathers its inputs from the database and ``settings.CHECKPOINTS``:

- **Where the job runs.** A job with a live placement: the servers it holds and their tiers (a gang is
  interrupted when any of its servers is, so the rates of its servers add up). Otherwise where it will most
  likely run — the first tier its routing prefers (``spot-ok``: spot) — on the fewest servers of the fleet's
  largest size its replicas pack into (an 8-GPU server when the inventory is empty); a request below one GPU
  counts as one GPU.
- **How often the scheduler evicts work like it.** The observed eviction rate of the team's preemptible work on
  the job's tier(s) over the last :data:`EVICTION_WINDOW_S` (7 days): the scheduler's evictions — reclaim,
  priority, production, MIG reconfiguration; one per job and instant, however many allocations it closed —
  per job-hour that work held a placement there (each job's allocation time, overlaps counted once), as
  evictions per job-day. It adds to the tier's interruptions (spot interruptions and node losses stay in the tier's
  rate, so nothing counts twice). Without history — the team ran no preemptible work on that tier in the
  window, or no team is given — the tier's rate alone stands, as before.
- **What a checkpoint costs.** The median ``duration_s`` of the job's latest reported checkpoints
  (``jobs.services.checkpoint_record``; a duration of 0 means "not reported" and is skipped); before the first,
  the model's training state written at ``write_gib_per_s`` when the job states a model; else
  ``default_cost_s``.

Reads only: the job given is one the caller has already scoped to the requesting user.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db.models import Max, Q
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.core import CheckpointInterval, ModelProfile, checkpoint_interval, checkpointing
from scheduler.core.model.vocabulary import Dtype, EventType, EvictionReason, ModelMode, NodeState
from scheduler.models import Node
from teams.models import Team

DEFAULT_GPUS_PER_NODE = 8  # an HGX/DGX server, for an empty inventory
MEASURED_LAST = 20  # the latest checkpoints whose median is the measured cost
# The source window of the observed eviction rate: a week holds a team's weekday and weekend load, and is short
# enough that a quota or priority change shows within days.
EVICTION_WINDOW_S = 7 * 86_400
# The scheduler's own evictions (scheduler.core.model.plan.Evict.reason): what the tiers' rates leave out. Spot
# reclaims and node losses are the tier's interruptions, already in its rate; an admin's requeue and the job's
# own failure are neither.
SCHEDULER_EVICTIONS = frozenset(
    {
        EvictionReason.RECLAIM,
        EvictionReason.PRIORITY,
        EvictionReason.PRODUCTION,
        EvictionReason.BACKFILL,
        EvictionReason.RECONFIGURE,
    }
)


@dataclass(frozen=True)
class ObservedEvictions:
    """The scheduler's evictions of a team's preemptible work on some tiers over a window, and the job-hours that
    work ran there."""

    evictions: int
    job_hours: float
    window_s: int
    tiers: tuple[str, ...]

    @property
    def per_job_day(self) -> float:
        return self.evictions / self.job_hours * 24

    @property
    def window_days(self) -> float:
        return self.window_s / 86_400


class CostSource(StrEnum):
    """Where the checkpoint cost came from."""

    MEASURED = "measured"
    MODEL = "model estimate"
    DEFAULT = "default"


@dataclass(frozen=True)
class IntervalProposal:
    """The proposal and its inputs, for a page to show beside the job's own interval."""

    interval: CheckpointInterval
    cost_source: CostSource
    measured_checkpoints: int  # how many reported durations the measured cost is the median of
    tiers: tuple[str, ...]  # the capacity tiers planned for (several when a live gang spans tiers)
    nodes: int
    placed: bool  # tiers and servers from the job's live placement; else where it will most likely run
    interruptions_per_node_day: float  # the mean over its servers
    own_interval_s: int | None = None  # the job's own interval, for comparison
    evictions: ObservedEvictions | None = None  # the observed rate folded in; None: no history, the tier's alone

    @property
    def interval_s(self) -> float:
        return self.interval.interval_s

    @property
    def cost_s(self) -> float:
        return self.interval.cost_s

    @property
    def mtbf_s(self) -> float | None:
        """None when no interruption is expected (every rate 0)."""
        return self.interval.mtbf_s if math.isfinite(self.interval.mtbf_s) else None

    @property
    def young_s(self) -> float | None:
        """Young's interval before the bounds; None when no interruption is expected."""
        return self.interval.young_s if math.isfinite(self.interval.young_s) else None

    @property
    def bound(self) -> str:
        return self.interval.bound.value

    @property
    def tier_label(self) -> str:
        return " + ".join(self.tiers)

    @property
    def eviction_text(self) -> str:
        """Which eviction rate the MTBF used and from which window, in words."""
        days = f"{EVICTION_WINDOW_S / 86_400:g} days"
        observed = self.evictions
        if observed is None:
            return (
                f"No history of the team's preemptible work on {self.tier_label} in the last {days}: the tier's "
                "interruption rate alone."
            )
        return (
            f"It includes the team's observed evictions on {' + '.join(observed.tiers)}: {observed.evictions} in "
            f"{observed.job_hours:.1f} job-hours of its preemptible work over the last {days} "
            f"({observed.per_job_day:.2f} a job-day)."
        )


def checkpoint_interval_proposal(*, job: Job) -> IntervalProposal:
    """The interval proposed for ``job`` (module docstring), with its own interval beside it."""
    config = settings.CHECKPOINTS
    rates = config["interruptions_per_node_day"]
    live = list(Allocation.objects.filter(job=job, ended_at__isnull=True).values_list("node_id", "tier").distinct())
    if live:
        tier_of_node = dict(live)
        nodes = len(tier_of_node)
        rate = sum(rates.get(tier, 0.0) for tier in tier_of_node.values()) / nodes
        tiers = tuple(sorted(set(tier_of_node.values())))
    else:
        tier = checkpointing.likely_tier(job.tier, job.priority).value
        nodes = _servers(job.replicas, job.gpus or 1)
        rate, tiers = rates.get(tier, 0.0), (tier,)
    durations = _reported_durations(job)
    if durations:
        cost, source = statistics.median(durations), CostSource.MEASURED
    else:
        cost, source = _estimated_cost(_model_profile(job.model))
    evictions = observed_evictions(team=job.team, tiers=tiers, now=timezone.now())
    return IntervalProposal(
        interval=checkpoint_interval(
            cost_s=cost,
            interruptions_per_node_day=rate,
            nodes=nodes,
            max_interval_s=config["max_interval_s"],
            evictions_per_job_day=evictions.per_job_day if evictions is not None else 0.0,
        ),
        evictions=evictions,
        cost_source=source,
        measured_checkpoints=len(durations),
        tiers=tiers,
        nodes=nodes,
        placed=bool(live),
        interruptions_per_node_day=rate,
        own_interval_s=job.checkpoint_interval_s,
    )


def checkpoint_interval_proposal_for_spec(
    *,
    tier: str,
    priority: str,
    replicas: int,
    gpus_per_replica: int | None,
    model: ModelProfile | None,
    team: Team | None = None,
) -> IntervalProposal:
    """The interval proposed for a job not submitted yet, from the submit form's fields (``gpus_per_replica``
    None: a request below one GPU or stated by memory or model, counted as one GPU) for ``team`` (one the caller
    has scoped to the user; None: no observed evictions). Raises ValueError for a tier that is not a job tier."""
    config = settings.CHECKPOINTS
    planned = checkpointing.likely_tier(tier, priority).value
    nodes = _servers(replicas, gpus_per_replica or 1)
    rate = config["interruptions_per_node_day"].get(planned, 0.0)
    cost, source = _estimated_cost(model)
    evictions = observed_evictions(team=team, tiers=(planned,), now=timezone.now()) if team is not None else None
    return IntervalProposal(
        interval=checkpoint_interval(
            cost_s=cost,
            interruptions_per_node_day=rate,
            nodes=nodes,
            max_interval_s=config["max_interval_s"],
            evictions_per_job_day=evictions.per_job_day if evictions is not None else 0.0,
        ),
        evictions=evictions,
        cost_source=source,
        measured_checkpoints=0,
        tiers=(planned,),
        nodes=nodes,
        placed=False,
        interruptions_per_node_day=rate,
    )


def observed_evictions(*, team: Team, tiers: Iterable[str], now: datetime) -> ObservedEvictions | None:
    """The scheduler's evictions of ``team``'s preemptible work on ``tiers`` in the window before ``now``, and
    the job-hours it ran there (module docstring); None when it ran no time there (no history)."""
    tiers = tuple(sorted(set(tiers)))
    since = now - timedelta(seconds=EVICTION_WINDOW_S)
    rows = Allocation.objects.filter(job__team=team, job__preemptible=True, tier__in=tiers, started_at__lt=now).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=since)
    )
    spans: dict[int, list[tuple[datetime, datetime]]] = {}
    evicted: set[tuple[int, datetime]] = set()  # one eviction closes every allocation of the job at one instant
    for job_id, started, ended, reason in rows.values_list("job_id", "started_at", "ended_at", "end_reason"):
        spans.setdefault(job_id, []).append((max(started, since), min(ended or now, now)))
        if ended is not None and ended <= now and reason in SCHEDULER_EVICTIONS:
            evicted.add((job_id, ended))
    seconds = sum(_covered_s(job_spans) for job_spans in spans.values())
    if seconds <= 0:
        return None
    return ObservedEvictions(len(evicted), seconds / 3600, EVICTION_WINDOW_S, tiers)


def _covered_s(spans: list[tuple[datetime, datetime]]) -> float:
    """Seconds covered by the union of ``spans`` (a job's replicas and GPUs overlap in time)."""
    total, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is not None and start < reach:
            start = reach
        if end > start:
            total += (end - start).total_seconds()
            reach = end if reach is None else max(reach, end)
    return total


def _servers(replicas: int, gpus_per_replica: int) -> int:
    largest = Node.objects.exclude(state=NodeState.GONE).aggregate(largest=Max("gpu_count"))["largest"]
    return checkpointing.nodes_spanned(
        replicas=max(1, replicas), gpus_per_replica=gpus_per_replica, gpus_per_node=largest or DEFAULT_GPUS_PER_NODE
    )


def _reported_durations(job: Job) -> list[float]:
    rows = (
        JobEvent.objects.filter(job=job, type=EventType.CHECKPOINTED)
        .order_by("-at", "-id")
        .values_list("details", flat=True)[:MEASURED_LAST]
    )
    durations = []
    for details in rows:
        value = details.get("duration_s") if isinstance(details, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            durations.append(float(value))
    return durations


def _estimated_cost(model: ModelProfile | None) -> tuple[float, CostSource]:
    config = settings.CHECKPOINTS
    if model is None:
        return config["default_cost_s"], CostSource.DEFAULT
    return checkpointing.estimated_cost_s(model, write_gib_per_s=config["write_gib_per_s"]), CostSource.MODEL


def _model_profile(stored: Any) -> ModelProfile | None:
    """The job's model as the engine's profile; None when it states none (or, from an old row, an unreadable
    one: the default cost then stands in)."""
    if not isinstance(stored, dict):
        return None
    try:
        params_b = float(stored["params_b"])
        dtype, mode = Dtype(stored.get("dtype", Dtype.BF16)), ModelMode(stored.get("mode", ModelMode.INFERENCE))
    except (KeyError, TypeError, ValueError):
        return None
    if not (params_b > 0 and math.isfinite(params_b)):
        return None
    return ModelProfile(params_b=params_b, dtype=dtype, mode=mode)
