"""Reads of jobs, always scoped to the requesting user."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from jobs.models import Job
from teams.selectors import team_list_for_user


def job_list_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    """Jobs of the teams the user may see, newest first."""
    return (
        Job.objects.filter(team__in=team_list_for_user(user=user))
        .select_related("team", "project", "submitted_by")
        .order_by("-submitted_at", "-id")
    )
