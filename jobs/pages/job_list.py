"""The jobs page (``/jobs/``): every job of the user's teams in any state, searched, filtered, sorted and paged
by the query string (so a view of it is a bookmark), with bulk cancel for the rows the reader may cancel.

It filters with the API list's own :class:`~jobs.api.filters.JobFilter`, so the page and ``/api/v1/jobs/``
answer the same question the same way; a bad filter value is shown on the page instead of a list.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from jobs import access
from jobs.api.filters import JobFilter
from jobs.errors import JobsError, JobSpecInvalid
from jobs.models import Job
from jobs.selectors.jobs import job_list_for_user, jobs_for_user_by_ids
from jobs.selectors.moves import with_moving
from jobs.services import job_cancel_bulk
from scheduler.core.model.vocabulary import JobState
from teams.http import SignedInRequest
from teams.models import Project
from teams.roles import is_platform_admin
from teams.selectors import team_list_for_user

JOBS_PAGE_SIZE = 50
LIVE_STATES = (JobState.PENDING, JobState.RUNNING)


@login_required
@require_http_methods(["GET", "POST"])
def job_list(request: SignedInRequest) -> HttpResponse:
    """GET: the filtered page. POST (``action=cancel`` with ``selected`` ids): cancel those jobs through the
    service, which enforces who may cancel what, then back to the same filtered page."""
    here = reverse("jobs:list") + (f"?{request.GET.urlencode()}" if request.GET else "")
    if request.method == "POST":
        _cancel_selected(request)
        return redirect(here)
    jobs = with_moving(job_list_for_user(user=request.user))
    filters = JobFilter(request.GET, queryset=jobs, request=request)
    filtered = filters.qs if filters.is_valid() else jobs.none()
    page = Paginator(filtered, JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    cancellable = _cancellable(request, list(page.object_list))
    teams = list(team_list_for_user(user=request.user).order_by("name"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "filters": filters,
        "page": page,
        "rows": [(job, job.pk in cancellable) for job in page.object_list],
        "can_cancel_any": bool(cancellable),
        "teams": teams,
        "projects": sorted(
            set(Project.objects.filter(team__in=teams).values_list("code", flat=True))  # one query, not per team
        ),
        "query_without_page": query.urlencode(),
        "here": here,
    }
    return render(request, "jobs/job_list.html", context)


def _cancellable(request: SignedInRequest, jobs: list[Job]) -> set[int]:
    """Ids of the live jobs on the page that the reader may cancel (the rules of ``jobs.access``), with the
    reader's roles read once."""
    live = [job for job in jobs if job.state in LIVE_STATES]
    if not live:
        return set()
    if is_platform_admin(request.user):
        return {job.pk for job in live}
    roles = access.roles_by_team(user=request.user)
    return {job.pk for job in live if access.can_cancel(user=request.user, job=job, role=roles.get(job.team_id))}


def _cancel_selected(request: SignedInRequest) -> None:
    if request.POST.get("action") != "cancel":
        messages.error(request, "Choose an action: tick jobs and press “Cancel selected”.")
        return
    raw = request.POST.getlist("selected")
    # ASCII digits only ("²" is a digit to str.isdigit and not to int), at most the id column's 19 digits.
    ids = list(dict.fromkeys(int(v) for v in raw if v.isascii() and v.isdigit() and len(v) <= 18))
    try:
        if not ids:
            raise JobSpecInvalid(["select at least one job first: tick the box at the start of its row"])
        jobs = jobs_for_user_by_ids(user=request.user, job_ids=ids)
        if len(jobs) != len(ids) or len(ids) != len(raw):
            # The same words whether a job is another team's or does not exist: an id reveals nothing.
            raise JobSpecInvalid(["some selected jobs are not jobs of your teams: reload the page and select again"])
        job_cancel_bulk(jobs=jobs, actor=request.user, reason=f"cancelled by {request.user} (bulk, jobs page)")
    except JobsError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancelled {len(jobs)} job{'s' if len(jobs) != 1 else ''}.")
