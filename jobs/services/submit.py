"""Submitting a job: the spec is validated whole, the team's priority grant (:mod:`teams.grants`) and the
actor's role checked, then one job and its ``submitted`` event are written.

Every key, type and range is checked by :func:`scheduler.specs.job.parse_job` against the one table of
:mod:`scheduler.core.sizing.bounds`, the same for the portal form, the API, ``manage.py jobs submit``, scenarios and
the right-sizing suggestion; a job the engine could never run on the inventory (memory no GPU holds, a
gang larger than the cluster) is refused with the engine's own reason. A team and a user each have a cap on
pending jobs (``settings.JOBS``); the team's row is locked while the cap is checked, so concurrent submits
cannot both take the last place.

A job spec uses the job keys of ``spec/scenario.md`` (one spec works in a scenario, ``manage.py jobs submit``
and the API); every problem is reported at once and nothing is written then.

:func:`job_submit_bulk` submits many jobs at once with the same checks, each spec judged as :func:`job_submit`
judges it; it reads the inventory once instead of once per job and writes every row in one transaction (the
live-loop benchmark seeds its queue with it: one by one, 14,000 submits re-read a 1,000-node inventory 14,000 times).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from jobs.access import check_member, check_submit
from jobs.errors import JobSpecInvalid, PendingLimitReached, TeamNotFound
from jobs.models import Job, JobEvent
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import inventory_census
from scheduler.core import Job as CoreJob
from scheduler.core import NodeCensus, Policy, bounds, rejection_reason
from scheduler.core.model.vocabulary import EventType, JobState
from scheduler.specs.fields import Errors, describe
from scheduler.specs.job import parse_job
from teams.models import Team


def job_submit(
    *,
    team: Team | str,
    spec: Mapping[str, Any],
    actor: User | None,
    source: str = "spec",
    now: datetime | None = None,
) -> Job:
    """Create a pending job of ``team`` (a Team or its slug) from ``spec``; record a ``submitted`` event.

    ``source`` prefixes every error message (the file name for a command). Raises :class:`TeamNotFound`;
    :class:`PriorityNotGranted` when the team is not granted the priority, or production for the job's kind
    (:mod:`teams.grants`; it binds every actor, the system's too); :class:`JobPermissionDenied` when the actor
    is not a member of the team, or is a member asking for ``high``/``production`` priority or a rank (``field``
    says which); :class:`JobSpecInvalid` listing every
    problem of the spec; :class:`PendingLimitReached` when the team or the actor is at its cap of pending
    jobs. Nothing is written then.
    """
    team_row = _team(team)
    role = check_member(actor=actor, team=team_row)
    fields = _fields_from_spec(spec, team_row, source)
    # After the spec is known valid, so a bad priority is a spec error for everyone; a good one beyond the
    # role is a refusal.
    check_submit(
        actor=actor, team=team_row, role=role, priority=fields["priority"], kind=fields["kind"], rank=fields["rank"]
    )
    at = now or timezone.now()
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=team_row.pk).first()  # module doc: caps hold under races
        _check_pending_limits(team_row, actor)
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


@dataclass(frozen=True, slots=True)
class JobSubmission:
    """One job of :func:`job_submit_bulk`: the team (a Team or its slug), the spec, and when it was submitted
    (None: the call's ``now``)."""

    team: Team | str
    spec: Mapping[str, Any]
    at: datetime | None = None


def job_submit_bulk(
    *, submissions: Sequence[JobSubmission], actor: User | None, source: str = "spec", now: datetime | None = None
) -> list[Job]:
    """:func:`job_submit` for many jobs at once: every submission is checked as that function checks one (spec,
    grant, role, never-runs on the inventory as it is), the pending caps with the whole batch counted, and then
    every job and its ``submitted`` event are written in one transaction. Returns the jobs in submission order.

    All or nothing: the first refusal raises what :func:`job_submit` raises (:class:`JobSpecInvalid` collects the
    spec problems of every submission, each message prefixed ``source[i]``) and nothing is written.
    """
    at = now or timezone.now()
    nodes = inventory_census()  # once for the batch: what _never_runs reads per job
    policy = policy_current()
    teams: dict[str, Team] = {}
    roles: dict[int, str] = {}
    problems: list[str] = []
    rows: list[tuple[Team, dict[str, Any], Mapping[str, Any], datetime]] = []
    for index, item in enumerate(submissions):
        key = item.team if isinstance(item.team, str) else item.team.slug
        team_row = teams.get(key) or _team(item.team)
        teams[key] = team_row
        if team_row.pk not in roles:
            roles[team_row.pk] = check_member(actor=actor, team=team_row)
        try:
            fields = _fields_from_spec(item.spec, team_row, f"{source}[{index}]", nodes=nodes, policy=policy)
        except JobSpecInvalid as error:
            problems.extend(error.errors)
            continue
        role = roles[team_row.pk]
        check_submit(
            actor=actor, team=team_row, role=role, priority=fields["priority"], kind=fields["kind"], rank=fields["rank"]
        )
        rows.append((team_row, fields, item.spec, item.at or at))
    if problems:
        raise JobSpecInvalid(problems)
    with transaction.atomic():
        per_team: dict[int, int] = {}
        for team_row, _fields, _spec, _at in rows:
            per_team[team_row.pk] = per_team.get(team_row.pk, 0) + 1
        for team_row in sorted(teams.values(), key=lambda t: t.pk):  # a fixed lock order: no deadlock between batches
            Team.objects.select_for_update().filter(pk=team_row.pk).first()
        for team_row in teams.values():
            _check_pending_limits(team_row, actor, adding=per_team.get(team_row.pk, 0), adding_by_actor=len(rows))
        jobs = Job.objects.bulk_create(
            [
                Job(
                    team=team_row,
                    submitted_by=actor if actor is not None else None,
                    submitted_at=submitted_at,
                    state=JobState.PENDING,
                    state_reason="submitted; waits for the next scheduling cycle",
                    **fields,
                )
                for team_row, fields, _spec, submitted_at in rows
            ],
            batch_size=_BULK_BATCH,
        )
        JobEvent.objects.bulk_create(
            [
                JobEvent(job=job, type=EventType.SUBMITTED, at=job.submitted_at, actor=actor, details={"spec": spec})
                for job, spec in zip(jobs, (dict(row[2]) for row in rows), strict=True)
            ],
            batch_size=_BULK_BATCH,
        )
    return jobs


# Rows per INSERT: SQLite allows 32,766 parameters per statement (https://www.sqlite.org/limits.html, "Maximum
# Number Of Host Parameters"); a job row has about 35 columns.
_BULK_BATCH = 500


def _team(team: Team | str) -> Team:
    if isinstance(team, Team):
        return team
    row = Team.objects.filter(slug=team).first()
    if row is None:
        known = ", ".join(Team.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
        raise TeamNotFound(f"no team with slug {team!r}; known teams: {known}")
    return row


def _fields_from_spec(
    spec: Mapping[str, Any],
    team: Team,
    source: str,
    *,
    nodes: NodeCensus | None = None,
    policy: Policy | None = None,
) -> dict[str, Any]:
    """The Job fields a spec sets, or :class:`JobSpecInvalid` with every problem. ``nodes`` and ``policy``: the
    inventory (as its census) and policy a batch read once (None: read them now)."""
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
        _check_whole_seconds(errors, data)
    project = _project(errors, team, data)
    if errors.messages or parsed is None:
        raise JobSpecInvalid(errors.messages or [f"{source}: the spec is not a valid job"])
    never = _never_runs(parsed, nodes, policy)
    if never is not None:
        raise JobSpecInvalid([f"{source}: this job could never run on this cluster: {never}"])
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
        # Stored complete, defaults filled in, so every reader sees the profile the engine sizes.
        "model": {
            "params_b": request.model.params_b,
            "dtype": str(request.model.dtype),
            "context": request.model.context,
            "batch": request.model.batch,
            "mode": str(request.model.mode),
        }
        if request.model is not None
        else None,
        "replicas": parsed.replicas,
        "gpu_model": parsed.gpu_model or "",
        "priority": str(parsed.priority),
        "rank": parsed.rank,
        "preemptible": parsed.preemptible,
        "consolidate": parsed.consolidate,
        "checkpoint_interval_s": int(parsed.checkpoint_interval_s) if parsed.checkpoint_interval_s else None,
        "tier": str(parsed.tier),
        "duration_s": int(parsed.duration_s) if parsed.duration_s else None,
        # Checked by parse_job (an integer, or a float with no fraction, in range); the engine has no use for it.
        "restart_limit": int(data.get("restart_limit", bounds.DEFAULT_RESTART_LIMIT)),
        # Checked by parse_job (numbers in range); the cluster backend sizes the pods with them.
        "cpu": Decimal(str(data["cpu"])).quantize(Decimal("0.001")) if data.get("cpu") is not None else None,
        "host_memory_gib": Decimal(str(data["host_memory_gib"])).quantize(Decimal("0.01"))
        if data.get("host_memory_gib") is not None
        else None,
    }
    return fields


def _never_runs(job: CoreJob, nodes: NodeCensus | None = None, policy: Policy | None = None) -> str | None:
    """The engine's reason to reject ``job`` on the inventory as it is, or None. An empty inventory judges
    nothing: nodes may yet register, and the cycle judges the job then. ``nodes``/``policy``: read once by the
    caller for a batch, the nodes as their census (None: read now)."""
    nodes = inventory_census() if nodes is None else nodes
    return rejection_reason(job, nodes, policy if policy is not None else policy_current()) if nodes else None


def _check_whole_seconds(errors: Errors, data: dict[str, Any]) -> None:
    """Durations are stored in whole seconds (the ranges themselves are :mod:`scheduler.core.sizing.bounds`')."""
    for key in ("checkpoint_interval_s", "duration_s"):
        if key in data and not float(data[key]).is_integer():
            errors.add(key, f"must be a whole number of seconds, got {describe(data[key])}")


def _check_pending_limits(team: Team, actor: User | None, *, adding: int = 1, adding_by_actor: int = 1) -> None:
    """Refuse a submit of ``adding`` jobs to ``team`` (``adding_by_actor`` of the actor's in all) that would take
    the team, or the actor, past its cap on pending jobs (settings.JOBS). Called with the team's row locked, so
    concurrent submits cannot both take the last place."""
    limits = settings.JOBS
    pending = Job.objects.filter(state=JobState.PENDING)
    team_limit = limits["pending_limit_team"]
    if pending.filter(team=team).count() + adding > team_limit:
        raise PendingLimitReached(
            f"team {team.slug} already has {team_limit} pending jobs, its limit: wait for some to start, or "
            "cancel some (a platform admin can raise JOBS_PENDING_LIMIT_TEAM)"
        )
    user_limit = limits["pending_limit_user"]
    if actor is not None and pending.filter(submitted_by=actor).count() + adding_by_actor > user_limit:
        raise PendingLimitReached(
            f"you already have {user_limit} pending jobs, the limit per user: wait for some to start, or cancel "
            "some (a platform admin can raise JOBS_PENDING_LIMIT_USER)"
        )


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
