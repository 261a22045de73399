"""Object-level checks of the API, on top of the scoped selectors (which already hide other teams: 404)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from jobs import access
from jobs.api.authentication import JobPrincipal
from jobs.models import Job
from teams.models import Team
from teams.selectors import team_list_for_user


def team_for(request: Request, slug: str) -> tuple[Team, str]:
    """The team ``slug`` the user may see and their role there; 404 otherwise (existing or not)."""
    team = team_list_for_user(user=request.user).filter(slug=slug).first()
    role = access.team_role(user=request.user, team=team) if team is not None else None
    if team is None or role is None:
        raise NotFound(f"No team {slug!r} among yours.")
    return team, role


def role_for_job(request: Request, job: Job) -> str:
    role = access.team_role(user=request.user, team=job.team_id)
    if role is None:
        raise NotFound()
    return role


def require_manage(role: str, what: str) -> None:
    if not access.can_manage(role):
        raise PermissionDenied(f"Only the team's lead or a platform admin can {what}.")


def require_cancel(request: Request, job: Job, role: str) -> None:
    if not access.can_cancel(user=request.user, job=job, role=role):
        raise PermissionDenied("Only the team's lead, a platform admin or the job's submitter can cancel it.")


class ReportsForThisJob(BasePermission):
    """A checkpoint report comes from the job it is about: the caller is a job credential's principal
    (anything else, a user included, is unauthenticated here: 401) and the job in the URL is its own (403)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = request.user
        if not isinstance(principal, JobPrincipal):
            return False
        target = str(view.kwargs.get("id", ""))
        if target != str(principal.job_id):
            raise PermissionDenied(f"This credential reports for job {principal.job_id} only, not for job {target}.")
        return True
