"""Priority grants: the priorities a team's jobs may have, and the job kinds that may run at ``production``.

Production preempts other teams' work anywhere on the fleet (``docs/scheduling-rules.md``), so it is granted,
not self-served: a platform admin sets a team's highest priority (``Team.max_priority``, default ``high``) and
the kinds of job production is for (``Team.production_kinds``, default inference only), in the admin's Teams
page or in an organisation file (``max_priority``, ``production_kinds``; ``teams apply``). The grant binds
everyone who gives a job of the team a priority (its lead, a platform admin, the system's own commands): the
jobs services check it (:func:`jobs.access.check_grant`), so an admin grants first and submits second.

Modelled on how the systems our admins know restrict priority: Kubernetes limits who may use a PriorityClass
per namespace (a ResourceQuota whose ``scopeSelector`` names the class, with the class listed under the
ResourceQuota admission plugin's ``limitedResources``: a namespace without such a quota is refused with 403,
https://kubernetes.io/docs/concepts/policy/resource-quotas/#limit-priority-class-consumption-by-default);
Kueue's cluster-scoped WorkloadPriorityClass is an admin's object, not a tenant's
(https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/); Run:ai gives inference its very high,
non-preemptible priority by workload type while training is preemptible by design
(https://docs.nvidia.com/run-ai/self-hosted/documentation/platform-management/runai-scheduler/scheduling/workload-priority-control).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from scheduler.core.model.vocabulary import PRIORITY_INDEX, JobKind, Priority

if TYPE_CHECKING:
    from teams.models import Team

DEFAULT_MAX_PRIORITY = Priority.HIGH.value
DEFAULT_PRODUCTION_KINDS: tuple[str, ...] = (JobKind.INFERENCE.value,)
PRIORITIES: tuple[str, ...] = tuple(p.value for p in Priority)  # highest first
JOB_KINDS: tuple[str, ...] = tuple(k.value for k in JobKind)
# Where a platform admin grants it, as the admin names the fields.
ADMIN_PATH = "Admin → Teams → {name}"


def default_production_kinds() -> list[str]:
    """A new team's ``production_kinds`` (a callable: a JSONField default must not be a shared list)."""
    return list(DEFAULT_PRODUCTION_KINDS)


def kinds_normalized(kinds: Iterable[str]) -> list[str]:
    """``kinds`` once each, in the vocabulary's order, so the same grant is stored (and audited) one way."""
    wanted = set(kinds)
    return [kind for kind in JOB_KINDS if kind in wanted]


def priorities_granted(team: Team, kind: str | None = None) -> tuple[str, ...]:
    """The priorities ``team``'s jobs may have, highest first. For a job of ``kind``, production only when that
    kind may use it; without a kind, production when any kind may."""
    ceiling = PRIORITY_INDEX.get(team.max_priority, PRIORITY_INDEX[DEFAULT_MAX_PRIORITY])
    granted = [p for p in PRIORITIES if PRIORITY_INDEX[p] >= ceiling]
    kinds = team.production_kinds or []
    if Priority.PRODUCTION.value in granted and not (kinds if kind is None else kind in kinds):
        granted.remove(Priority.PRODUCTION.value)
    return tuple(granted)


def grant_refusal(team: Team, *, priority: str, kind: str) -> str | None:
    """Why a ``kind`` job of ``team`` may not have ``priority``, naming who can grant it and how; None when it
    may. The reason ends where the caller says what to do meanwhile."""
    if priority in priorities_granted(team, kind):
        return None
    where = ADMIN_PATH.format(name=team.name)
    if PRIORITY_INDEX.get(priority, len(PRIORITIES)) < PRIORITY_INDEX.get(team.max_priority, 0):
        return (
            f"team {team.slug} is not granted {priority} priority (its highest is {team.max_priority}): {priority} "
            f"is granted by a platform admin: ask one to allow it for team {team.slug} ({where} → Highest priority) "
            f"or set `max_priority: {priority}` for team {team.slug} in the organisation file (teams apply)"
        )
    allowed = ", ".join(team.production_kinds or []) or "no"
    return (
        f"team {team.slug} may use production priority for {allowed} jobs only, not for a {kind} job: production "
        f"for {kind} jobs is granted by a platform admin: ask one to allow it for team {team.slug} ({where} → "
        f"Production for) or add {kind} to `production_kinds` of team {team.slug} in the organisation file "
        "(teams apply)"
    )
