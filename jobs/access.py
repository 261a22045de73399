"""Who may do what to a team's jobs: one set of rules, enforced by the jobs services and read by the edges.

- a **member** submits to their team at ``normal`` or ``low`` priority (no rank), and cancels the jobs they
  submitted (``Job.submitted_by``, the actor of the job's ``submitted`` event);
- a **lead** submits at any priority the team is granted and manages every job of the team: cancel, priority,
  rank and order;
- a **platform admin** (``teams.roles``) does everything everywhere;
- **finance** reads cost reports and changes no jobs: the finance role grants nothing here (a finance user
  who is also a member of a team has that member's rights, no more);
- anyone else does not see the team at all (the edges answer 404, not 403, so a team's existence leaks not);
- the **system** (``actor=None``: an operator's ``manage.py`` command, the demo feed, the scheduling loop)
  may do everything.

Above the roles sits the team's **priority grant** (:mod:`teams.grants`): the highest priority its jobs may
have and the job kinds production is for, set by a platform admin. It binds every role, the platform admin's
and the system's included (they grant first, in the admin or the organisation file): a team's policy is not a
person's right. :func:`check_grant` raises :class:`~jobs.errors.PriorityNotGranted` saying who grants it.

The services call the ``check_*`` functions, which raise :class:`~jobs.errors.JobPermissionDenied` with a
message naming whom to ask: they are the guarantee. Views and the API use the predicates (``team_role``,
``priorities_allowed``, ``can_manage``, ``can_cancel``) to offer only what the services would accept and to
answer with the right HTTP status before calling them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from jobs.errors import JobPermissionDenied, PriorityNotGranted
from jobs.models import Job
from scheduler.core.model.vocabulary import Priority
from teams.grants import grant_refusal, priorities_granted
from teams.models import Membership, Team
from teams.roles import AnyUser, is_finance, is_platform_admin

SYSTEM = "system"
ADMIN = "admin"
LEAD = Membership.Role.LEAD.value
MEMBER = Membership.Role.MEMBER.value


# Highest first, as the vocabulary orders them. A member's work waits its turn: jumping the team's queue or
# preempting colleagues is the lead's call.
_PRIORITIES_BY_ROLE: dict[str, tuple[str, ...]] = {
    SYSTEM: tuple(p.value for p in Priority),
    ADMIN: tuple(p.value for p in Priority),
    LEAD: tuple(p.value for p in Priority),
    MEMBER: (Priority.NORMAL.value, Priority.LOW.value),
}


def roles_by_team(*, user: AnyUser) -> dict[int, str]:
    """Team id → the user's role there (``lead``/``member``); platform admins are not listed (see
    :func:`team_role`)."""
    if not user.is_authenticated:
        return {}
    return dict(Membership.objects.filter(user_id=user.pk).values_list("team_id", "role"))


def team_role(*, user: AnyUser, team: Team | int, roles: dict[int, str] | None = None) -> str | None:
    """``admin``, ``lead``, ``member`` or None (no access). ``roles`` saves a query when already known."""
    if not user.is_authenticated or not user.is_active:
        return None
    if is_platform_admin(user):
        return ADMIN
    team_id = team if isinstance(team, int) else team.pk
    return (roles if roles is not None else roles_by_team(user=user)).get(team_id)


def priorities_allowed(role: str | None) -> tuple[str, ...]:
    """The priorities a role may give a job, highest first (empty: none)."""
    return _PRIORITIES_BY_ROLE.get(role or "", ())


def priorities_offered(role: str | None, team: Team, kind: str | None = None) -> tuple[str, ...]:
    """The priorities a ``role`` may give a job of ``team`` (of ``kind``; None: of any kind), highest first: what
    the role allows and the team is granted."""
    granted = priorities_granted(team, kind)
    return tuple(p for p in priorities_allowed(role) if p in granted)


def can_manage(role: str | None) -> bool:
    """Change priority, rank and order, cancel anyone's job of the team."""
    return role in (SYSTEM, ADMIN, LEAD)


def can_cancel(*, user: AnyUser | None, job: Job, role: str | None) -> bool:
    """Leads and admins cancel any job of the team; a member only the jobs they submitted."""
    if can_manage(role):
        return True
    return role == MEMBER and user is not None and job.submitted_by_id is not None and job.submitted_by_id == user.pk


# --- Enforcement: what the services call --------------------------------------------------------------------


def check_member(*, actor: AnyUser | None, team: Team) -> str:
    """The actor's role in ``team`` (``system`` for None); :class:`JobPermissionDenied` when they have none."""
    if actor is None:
        return SYSTEM
    role = team_role(user=actor, team=team)
    if role is None:
        raise JobPermissionDenied(_no_role(actor, team))
    return role


def check_submit(*, actor: AnyUser | None, team: Team, role: str, priority: str, kind: str, rank: int) -> None:
    """May ``actor``, whose ``role`` in ``team`` :func:`check_member` returned, submit a ``kind`` job at
    ``priority`` with ``rank``? Raises :class:`PriorityNotGranted` when the team is not granted it (asking the
    lead would not help, so this comes first), :class:`JobPermissionDenied` (``field`` ``priority`` or ``rank``)
    when the role does not allow it."""
    check_grant(team=team, priority=priority, kind=kind, then="submit at")
    allowed = priorities_allowed(role)
    check_priority(
        actor=actor, team=team, role=role, priority=priority, then=f"submit at {allowed[0]} and ask them to raise it"
    )
    if rank != 0 and not can_manage(role):
        raise JobPermissionDenied(
            f"{actor} is a member of team {team.slug}; only {_whom(team)} orders the team's jobs: "
            "leave rank out (or 0) and ask them to move the job",
            field="rank",
        )


def check_manage(*, actor: AnyUser | None, team: Team, what: str) -> str:
    """May ``actor`` ``what`` (e.g. "change a job's priority") in ``team``? Returns the role, or raises."""
    role = check_member(actor=actor, team=team)
    if not can_manage(role):
        raise JobPermissionDenied(f"only {_whom(team)} can {what}; {actor} is a member: ask them to do it")
    return role


def check_priority(*, actor: AnyUser | None, team: Team, role: str, priority: str, then: str = "ask them") -> None:
    """May ``role`` give a job of ``team`` this ``priority``? Raises :class:`JobPermissionDenied` if not; the
    message ends with ``then``, what the person can do instead."""
    allowed = priorities_allowed(role)
    if priority not in allowed:
        raise JobPermissionDenied(
            f"{actor} is a {role} of team {team.slug} and may use {' or '.join(allowed) or 'no'} priority; "
            f"{priority} needs {_whom(team)}: {then}",
            field="priority",
        )


def check_grant(*, team: Team, priority: str, kind: str, then: str = "use") -> None:
    """Is ``team`` granted ``priority`` for a ``kind`` job (:mod:`teams.grants`)? Raises
    :class:`PriorityNotGranted` naming who grants it if not, ending with what to do meanwhile (``then`` one of
    the granted priorities: "submit at high, normal or low")."""
    refusal = grant_refusal(team, priority=priority, kind=kind)
    if refusal is not None:
        granted = list(priorities_granted(team, kind))
        choices = f"{', '.join(granted[:-1])} or {granted[-1]}" if len(granted) > 1 else "".join(granted)
        raise PriorityNotGranted(f"{refusal}; meanwhile {then} {choices}" if granted else refusal)


def check_cancel(*, actor: AnyUser | None, jobs: Iterable[Job]) -> None:
    """May ``actor`` cancel every one of ``jobs`` (each with its ``team`` loaded)? Raises
    :class:`JobPermissionDenied` for the first that they may not, naming it; admin and role lookups are done
    once, whatever the number of jobs."""
    jobs = list(jobs)
    if actor is None or not jobs:
        return
    active = actor.is_authenticated and actor.is_active
    if active and is_platform_admin(actor):
        return
    roles: Mapping[int, str] = roles_by_team(user=actor) if active else {}
    for job in jobs:
        role = roles.get(job.team_id)
        if role is None:
            raise JobPermissionDenied(_no_role(actor, job.team))
        if not can_cancel(user=actor, job=job, role=role):
            who = job.submitted_by.get_username() if job.submitted_by is not None else "the system"
            raise JobPermissionDenied(
                f"job {job.pk} ({job.name}) was submitted by {who}; a member cancels only the jobs they "
                f"submitted: ask {_whom(job.team)} to cancel it"
            )


def _no_role(actor: AnyUser, team: Team) -> str:
    if not actor.is_authenticated:
        return "sign in first: anonymous users change no jobs"
    if not actor.is_active:
        return f"{actor}'s account is deactivated: a platform admin can reactivate it"
    if is_finance(actor):
        return (
            f"{actor} works in finance, which reads cost reports and changes no jobs; "
            f"for team {team.slug}'s jobs ask {_whom(team)}"
        )
    return f"{actor} is not a member of team {team.slug}: ask {_whom(team)} to add you"


def _whom(team: Team) -> str:
    """Who can do what a member cannot, by name: the team's leads (if any) or a platform admin."""
    leads = list(
        Membership.objects.filter(team=team, role=LEAD)
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )
    named = f" ({', '.join(leads)})" if leads else ""
    return f"team {team.slug}'s lead{named} or a platform admin"
