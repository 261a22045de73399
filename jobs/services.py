"""Writes to jobs: submit, cancel, reprioritise. Every change records a :class:`JobEvent` with its actor.

A job spec uses the job keys of ``spec/scenario.md`` (one spec works in a scenario, ``manage.py jobs submit``
and the API); it is validated whole before anything is written, and every problem is reported at once.

Permissions (``actor``): None is the system (an operator's command, the demo feed). A user must be a member
of the job's team (or a platform admin) to submit or cancel, and its lead (or a platform admin) to change a
priority or rank. Views add their own checks on top; these are the floor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from jobs.errors import JobPermissionDenied, JobSpecInvalid, JobStateError, TeamNotFound
from jobs.models import Allocation, Job, JobEvent
from scheduler.core.state import Slot
from scheduler.core.vocabulary import EventType, JobState, Priority
from scheduler.models import Node
from scheduler.sim.fields import Errors, describe, join
from scheduler.sim.job_spec import parse_job
from teams.models import Membership, Team
from teams.roles import is_platform_admin

_MAX_GPUS = 64  # Job.gpus' validator
_MAX_REPLICAS = 512  # Job.replicas' validator
_MAX_MEMORY_GIB = Decimal("999999.99")  # Job.memory_gib is DECIMAL(8, 2)
_MAX_SECONDS = 2_147_483_647  # PositiveIntegerField
_LIVE = (JobState.PENDING, JobState.RUNNING)


def job_submit(
    *,
    team: Team | str,
    spec: Mapping[str, Any],
    actor: AbstractBaseUser | None,
    source: str = "spec",
    now: datetime | None = None,
) -> Job:
    """Create a pending job of ``team`` (a Team or its slug) from ``spec``; record a ``submitted`` event.

    ``source`` prefixes every error message (the file name for a command). Raises :class:`TeamNotFound`,
    :class:`JobPermissionDenied`, or :class:`JobSpecInvalid` listing every problem; nothing is written then.
    """
    team_row = _team(team)
    _check_member(actor, team_row, lead=False)
    fields = _fields_from_spec(spec, team_row, source)
    at = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.create(
            team=team_row,
            submitted_by=actor if actor is not None else None,
            submitted_at=at,
            state=JobState.PENDING,
            state_reason="submitted; waits for the next scheduling cycle",
            **fields,
        )
        JobEvent.objects.create(job=job, type=EventType.SUBMITTED, at=at, actor=actor, details={"spec": dict(spec)})
    return job


def job_cancel(*, job: Job, actor: AbstractBaseUser | None, reason: str = "", now: datetime | None = None) -> Job:
    """Cancel a pending or running job: it ends now, its allocations close, and the next scheduling cycle stops
    its pods on the cluster. Raises :class:`JobStateError` for a job that has already ended."""
    _check_member(actor, job.team, lead=False)
    at = now or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state not in _LIVE:
            raise JobStateError(
                f"job {locked.pk} is already {locked.state}; only pending or running jobs can be cancelled"
            )
        Allocation.objects.filter(job=locked, ended_at__isnull=True).update(ended_at=at, end_reason="cancelled")
        locked.state = JobState.CANCELLED
        locked.state_reason = reason or "cancelled"
        locked.finished_at = max(at, locked.submitted_at)
        locked.queue_position = locked.team_queue_position = locked.eta_at = None
        locked.save(
            update_fields=["state", "state_reason", "finished_at", "queue_position", "team_queue_position", "eta_at"]
        )
        JobEvent.objects.create(
            job=locked, type=EventType.CANCELLED, at=at, actor=actor, details={"reason": reason} if reason else {}
        )
    return locked


def job_set_priority(*, job: Job, priority: str, actor: AbstractBaseUser | None, now: datetime | None = None) -> Job:
    """Change a live job's priority (``production`` | ``high`` | ``normal`` | ``low``); the next cycle uses it."""
    allowed = [p.value for p in Priority]
    if priority not in allowed:
        raise JobSpecInvalid([f"priority: must be one of {', '.join(allowed)}; got {describe(priority)}"])
    return _change(job=job, field="priority", value=priority, event=EventType.PRIORITY_CHANGED, actor=actor, now=now)


def job_set_rank(*, job: Job, rank: int, actor: AbstractBaseUser | None, now: datetime | None = None) -> Job:
    """Change a live job's rank, its order within the team (lower runs first)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or abs(rank) > _MAX_SECONDS:
        raise JobSpecInvalid([f"rank: must be a whole number, got {describe(rank)}"])
    return _change(job=job, field="rank", value=rank, event=EventType.RANK_CHANGED, actor=actor, now=now)


def _change(
    *, job: Job, field: str, value: object, event: EventType, actor: AbstractBaseUser | None, now: datetime | None
) -> Job:
    _check_member(actor, job.team, lead=True)
    at = now or timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state not in _LIVE:
            raise JobStateError(f"job {locked.pk} is already {locked.state}; only pending or running jobs can change")
        old = getattr(locked, field)
        if old == value:
            return locked
        setattr(locked, field, value)
        locked.save(update_fields=[field])
        JobEvent.objects.create(job=locked, type=event, at=at, actor=actor, details={"old": old, "new": value})
    return locked


def _team(team: Team | str) -> Team:
    if isinstance(team, Team):
        return team
    row = Team.objects.filter(slug=team).first()
    if row is None:
        known = ", ".join(Team.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise TeamNotFound(f"no team with slug {team!r}; known teams: {known}")
    return row


def _check_member(actor: AbstractBaseUser | None, team: Team, *, lead: bool) -> None:
    if actor is None or is_platform_admin(actor):
        return
    roles = [Membership.Role.LEAD] if lead else [Membership.Role.LEAD, Membership.Role.MEMBER]
    if not actor.is_active or not Membership.objects.filter(user=actor, team=team, role__in=roles).exists():
        who = "a lead" if lead else "a member"
        raise JobPermissionDenied(f"{actor} is not {who} of team {team.slug}: ask its lead or a platform admin")


def _fields_from_spec(spec: Mapping[str, Any], team: Team, source: str) -> dict[str, Any]:
    """The Job fields a spec sets, or :class:`JobSpecInvalid` with every problem."""
    errors = Errors(source)
    if not isinstance(spec, Mapping):
        errors.add("", f"a job spec must be a JSON object, got {describe(spec)}")
        raise JobSpecInvalid(errors.messages)
    data = dict(spec)
    if "team" in data and data["team"] not in (team.slug, team.name):
        errors.add("team", f"names {describe(data['team'])}, but the job is submitted to team {team.slug!r}")
    if "gpu_milli" in data:
        errors.add("gpu_milli", "is a trace-only key: ask for gpus, mig_profile, memory_gib or model instead")
        del data["gpu_milli"]
    # parse_job checks every key, type and range of spec/scenario.md; id and team come from the submission.
    data["team"] = team.slug
    name = data.get("name") if isinstance(data.get("name"), str) and data.get("name", "").strip() else None
    data.setdefault("id", name or "job")
    parsed = parse_job(errors, "", data, submitted_at=0.0)
    if parsed is not None:
        _check_limits(errors, data)
    project = _project(errors, team, data)
    if errors.messages or parsed is None:
        raise JobSpecInvalid(errors.messages or [f"{source}: the spec is not a valid job"])
    request = parsed.request
    fields: dict[str, Any] = {
        "name": (name or str(data["id"])).strip(),
        "project": project,
        "kind": str(parsed.kind),
        "image": data.get("image", ""),
        "command": list(data.get("command", [])),
        "env": dict(data.get("env", {})),
        "gpus": request.gpus,
        "mig_profile": request.mig_profile or "",
        "memory_gib": Decimal(str(request.memory_gib)).quantize(Decimal("0.01"))
        if request.memory_gib is not None
        else None,
        "model": dict(data["model"]) if request.model is not None else None,
        "replicas": parsed.replicas,
        "gpu_model": parsed.gpu_model or "",
        "priority": str(parsed.priority),
        "rank": parsed.rank,
        "preemptible": parsed.preemptible,
        "checkpoint_interval_s": int(parsed.checkpoint_interval_s) if parsed.checkpoint_interval_s else None,
        "tier": str(parsed.tier),
        "duration_s": int(parsed.duration_s) if parsed.duration_s else None,
    }
    return fields


def _check_limits(errors: Errors, data: dict[str, Any]) -> None:
    """The database's limits, beyond what the spec format itself allows."""
    if "gpus" in data and data["gpus"] > _MAX_GPUS:
        errors.add("gpus", f"must be at most {_MAX_GPUS} per replica; use replicas for a larger gang")
    if "replicas" in data and data["replicas"] > _MAX_REPLICAS:
        errors.add("replicas", f"must be at most {_MAX_REPLICAS}")
    if "memory_gib" in data and Decimal(str(data["memory_gib"])) > _MAX_MEMORY_GIB:
        errors.add("memory_gib", f"must be at most {_MAX_MEMORY_GIB}")
    for key in ("checkpoint_interval_s", "duration_s"):
        if key in data and (not float(data[key]).is_integer() or data[key] > _MAX_SECONDS):
            errors.add(key, f"must be a whole number of seconds up to {_MAX_SECONDS}, got {describe(data[key])}")
    if "rank" in data and abs(data["rank"]) > _MAX_SECONDS:
        errors.add("rank", f"must be between -{_MAX_SECONDS} and {_MAX_SECONDS}")
    for key, limit in (("name", 200), ("image", 500)):
        if isinstance(data.get(key), str) and len(data[key]) > limit:
            errors.add(key, f"must be at most {limit} characters")
    if "id" in data and not isinstance(data.get("name"), str) and len(str(data["id"])) > 200:
        errors.add(join("", "id"), "must be at most 200 characters")


def _project(errors: Errors, team: Team, data: dict[str, Any]) -> Any:
    code = data.get("project")
    if code is None:
        return None
    if not isinstance(code, str):
        return None  # parse_job reported it
    project = team.projects.filter(code=code).first()
    if project is None:
        known = ", ".join(team.projects.order_by("code").values_list("code", flat=True)) or "none"
        errors.add("project", f"team {team.slug} has no project {code!r}; its projects: {known}")
    return project


# --- Transitions the scheduling loop records (scheduler.record / scheduler.reconcile), actor: the scheduler ---


def job_bind_record(*, job: Job, slots: Sequence[Sequence[Slot]], nodes: Mapping[str, Node], at: datetime) -> None:
    """Record that ``job`` (pending) now holds ``slots`` (one tuple per replica): allocations, state, event.

    The allocation constraints make a double booking fail the caller's transaction (nothing bound twice).
    """
    for replica, replica_slots in enumerate(slots):
        for slot in replica_slots:
            node = nodes[slot.node]
            Allocation.objects.create(
                job=job,
                replica=replica,
                node=node,
                gpu_index=slot.gpu,
                mig_profile=slot.mig_profile or "",
                mig_start=slot.mig_start,
                tier=node.tier,
                price_per_gpu_hour=node.price_per_gpu_hour,
                started_at=at,
            )
    job.state = JobState.RUNNING
    job.started_at = max(at, job.submitted_at)
    job.state_reason = ""
    job.queue_position = job.team_queue_position = job.eta_at = None
    job.save(update_fields=["state", "started_at", "state_reason", "queue_position", "team_queue_position", "eta_at"])
    placements = [
        [{"node": s.node, "gpu": s.gpu, "mig_profile": s.mig_profile, "mig_start": s.mig_start} for s in replica]
        for replica in slots
    ]
    JobEvent.objects.create(job=job, type=EventType.BOUND, at=at, details={"placements": placements})


def job_requeue(*, job: Job, reason: str, by: str | None, at: datetime, message: str = "") -> None:
    """A running job loses its devices (preempted, node lost, bind refused) and waits again."""
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(ended_at=at, end_reason=reason[:32])
    cause = f"preempted by job {by} ({reason})" if by else f"evicted ({reason})"
    job.state = JobState.PENDING
    job.state_reason = f"{cause}{': ' + message if message else ''}; waits for the next scheduling cycle"
    job.save(update_fields=["state", "state_reason"])
    JobEvent.objects.create(job=job, type=EventType.PREEMPTED, at=at, details={"reason": reason, "by": by})
    JobEvent.objects.create(job=job, type=EventType.REQUEUED, at=at, details={"message": message} if message else {})


def job_finish(*, job: Job, state: JobState, at: datetime, reason: str = "") -> None:
    """A job ends for good (completed, failed or rejected): allocations close, queue fields clear, event."""
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(ended_at=at, end_reason=str(state)[:32])
    job.state = state
    job.state_reason = reason
    job.finished_at = max(at, job.submitted_at)
    job.queue_position = job.team_queue_position = job.eta_at = None
    job.save(update_fields=["state", "state_reason", "finished_at", "queue_position", "team_queue_position", "eta_at"])
    JobEvent.objects.create(job=job, type=EventType(str(state)), at=at, details={"reason": reason} if reason else {})
