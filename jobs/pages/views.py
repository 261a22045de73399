"""The team lead's pages: dashboard, submit (with a live right-sizing suggestion), queue, job detail, and
priority management. Views parse input, check access (``jobs.access``), call one service or selector, and
render; a team or job the user may not see is a 404, whatever the reason.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from jobs import access
from jobs.api.filters import QueueFilter
from jobs.checkpoint_intervals import (
    IntervalProposal,
    checkpoint_interval_proposal,
    checkpoint_interval_proposal_for_spec,
)
from jobs.errors import (
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    JobNotFound,
    JobPermissionDenied,
    JobsError,
    JobSpecInvalid,
    JobStateError,
    LogRequestInvalid,
)
from jobs.idempotency import Answer, fingerprint, idempotent_write
from jobs.models import Job
from jobs.pages.forms import CancelForm, IntervalForm, PriorityForm, SubmitForm, SuggestionForm
from jobs.pages.job_page import job_history, preemption_count
from jobs.selectors.jobs import (
    NO_POSITION_YET,
    job_allocations,
    job_events,
    job_get_for_user,
    job_list_queue,
    job_usage,
    jobs_for_user_by_ids,
    resuming_jobs,
)
from jobs.selectors.logs import (
    DOWNLOAD_LIMIT_BYTES,
    MAX_TAIL_LINES,
    download_name,
    job_log_panel,
    job_log_read,
    log_params,
)
from jobs.selectors.moves import job_moves
from jobs.selectors.network import fabric_warning, job_network
from jobs.selectors.node_requests import job_node_request
from jobs.selectors.preemptions import preemptors_for_user
from jobs.selectors.rightsizing import Suggestion, errors_by_key, suggest
from jobs.selectors.team_usage import DEFAULT_WINDOW, WINDOWS_S, team_dashboard, team_utilization_series
from jobs.services import (
    job_cancel,
    job_cancel_bulk,
    job_move,
    job_set_priority,
    job_set_priority_bulk,
    job_submit,
    team_order_key,
)
from scheduler.core.model.vocabulary import EventType, JobKind, JobState
from scheduler.errors import GatewayError
from teams.http import SignedInRequest
from teams.models import Team
from teams.roles import is_platform_admin
from teams.selectors import team_list_for_user

QUEUE_PAGE_SIZE = 50


def _team_for(request: HttpRequest, slug: str) -> tuple[Team, str]:
    """The team ``slug`` and the user's role in it, or 404 when the user may not see it."""
    team = team_list_for_user(user=request.user).filter(slug=slug).first()
    role = access.team_role(user=request.user, team=team) if team is not None else None
    if team is None or role is None:
        raise Http404("No such team among yours.")
    return team, role


def _job_for(request: HttpRequest, job_id: int) -> tuple[Job, str]:
    try:
        job = job_get_for_user(user=request.user, job_id=job_id)
    except JobNotFound:
        raise Http404("No such job in your teams.") from None
    role = access.team_role(user=request.user, team=job.team_id)
    if role is None:
        raise Http404("No such job in your teams.")
    return job, role


@login_required
@require_GET
def dashboard_home(request: SignedInRequest) -> HttpResponse:
    """The first of the user's teams; without a team, the overview that says what to do."""
    team = team_list_for_user(user=request.user).order_by("name").first()
    if team is None:
        return redirect("home")
    return redirect("jobs:dashboard", slug=team.slug)


@login_required
@require_GET
def dashboard(request: SignedInRequest, slug: str) -> HttpResponse:
    team, role = _team_for(request, slug)
    window = request.GET.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS_S:
        window = DEFAULT_WINDOW
    data = team_dashboard(team=team)
    series = team_utilization_series(team=team, window=window)
    figure = [
        {
            "gpu_class": s.gpu_class,
            # Already in the reader's zone; plotly.js ignores offsets, so it gets wall-clock strings.
            "t": [t.strftime("%Y-%m-%d %H:%M:%S") for t in s.times],
            "allocated": s.allocated_gpus,
            "used": s.used_gpus,
        }
        for s in series
    ]
    return render(
        request,
        "jobs/dashboard.html",
        {
            "team": team,
            "role": role,
            "data": data,
            "teams": team_list_for_user(user=request.user).order_by("name"),
            "series": figure,
            "has_series": any(any(s["allocated"]) for s in figure),
            "window": window,
            "windows": list(WINDOWS_S),
            "can_manage": access.can_manage(role),
        },
    )


def _submit_context(request: HttpRequest) -> tuple[list[Team], dict[int, str]]:
    """The teams the user may submit to and their role in each."""
    teams = list(team_list_for_user(user=request.user).order_by("name"))
    if is_platform_admin(request.user):
        return teams, {t.pk: access.ADMIN for t in teams}
    roles = access.roles_by_team(user=request.user)
    return teams, {t.pk: roles[t.pk] for t in teams if t.pk in roles}


@login_required
@require_http_methods(["GET", "POST"])
def submit(request: SignedInRequest) -> HttpResponse:
    teams, roles = _submit_context(request)
    if not teams:
        return render(request, "jobs/submit.html", {"form": None}, status=200)
    form = SubmitForm(request.POST or None, teams=teams, roles=roles, initial=_initial(request, teams))
    if request.method == "POST" and form.is_valid():
        team = form.cleaned_data["team"]
        try:
            job_id, name, replayed = _submit_once(request, team, form.spec(), form.cleaned_data["idempotency_key"])
        except JobSpecInvalid as exc:
            form.add_spec_errors(errors_by_key(exc.errors, "spec"))
        except JobPermissionDenied as exc:
            form.add_error(exc.field if exc.field in form.fields else "team", str(exc))
        except IdempotencyKeyReused:
            form.fresh_key()
            form.add_error(
                None,
                "This page was already submitted with other values, and made a job: see Jobs. "
                "Submit again to make another job with these values.",
            )
        except IdempotencyKeyInFlight:
            form.add_error(None, "This page is being submitted already: wait a moment, then see Jobs.")
        except JobsError as exc:  # the pending caps and any other refusal: on the form, never a 500
            form.add_error(None, str(exc))
        else:
            if replayed:
                messages.info(request, f"This page was already submitted: {name} was made then, not again.")
            else:
                messages.success(request, f"Submitted {name}: it waits for the next scheduling cycle.")
            return redirect("jobs:detail", job_id=job_id)
    data = request.POST or None
    suggestion = _suggestion(_suggestion_form(data, teams, initial_team=form["team"].value()))
    context = {
        "form": form,
        "suggestion": suggestion,
        "fabric_warning": fabric_warning(suggestion),
        "proposal": _proposal(data, data.get("team") if data is not None else form["team"].value(), teams),
    }
    return render(request, "jobs/submit.html", context)


def _submit_once(request: SignedInRequest, team: Team, spec: dict[str, Any], key: str) -> tuple[int, str, bool]:
    """Submit ``spec`` to ``team`` once per form key (jobs.idempotency): the job's id and name, and whether an
    earlier submit of the same page made it. Without a key (a page from before keys), a plain submit."""
    if not key:
        job = job_submit(team=team, spec=spec, actor=request.user, source="spec")
        return job.pk, job.name, False

    def write() -> Answer:
        job = job_submit(team=team, spec=spec, actor=request.user, source="spec")
        return Answer(201, {"id": job.pk, "name": job.name})

    digest = fingerprint(endpoint="portal submit", body={"team": team.slug, "spec": spec})
    outcome = idempotent_write(user=request.user, key=key, fingerprint=digest, write=write)
    body = outcome.answer.body
    return int(body["id"]), str(body["name"]), outcome.replayed


def _initial(request: HttpRequest, teams: list[Team]) -> dict[str, Any]:
    slug = request.GET.get("team")
    chosen = next((t for t in teams if t.slug == slug), teams[0])
    return {"team": chosen.pk}


def _suggestion_form(data: Any, teams: list[Team], initial_team: Any = None) -> SuggestionForm:
    """The answer's fields as posted, or the form's initial ones on a fresh page (team ``initial_team``)."""
    if data is None:
        data = {name: f.initial for name, f in SuggestionForm.base_fields.items() if f.initial is not None}
        data["team"] = initial_team
    return SuggestionForm(data, teams=teams)


def _suggestion(form: SuggestionForm) -> Suggestion | None:
    """What the job of ``form`` would get (jobs.selectors.rightsizing), or None while the fields do not describe one."""
    if not form.is_valid():
        return None
    team = form.cleaned_data.get("team")
    return suggest(form.answer_spec(), team=team.slug if team is not None else None)


def _proposal(data: Any, team_pk: Any, teams: list[Team]) -> IntervalProposal | None:
    """The checkpoint interval proposed for posted fields (or the form's initial ones) for the team ``team_pk``
    among the user's ``teams`` (its observed evictions fold in; another team's are never read: 404); None while
    the fields do not describe a job yet."""
    team = None
    if team_pk not in (None, ""):
        team = next((t for t in teams if str(t.pk) == str(team_pk)), None)
        if team is None:
            raise Http404("No such team.")
    if data is None:
        data = {name: field.initial for name, field in IntervalForm.base_fields.items() if field.initial is not None}
    form = IntervalForm(data)
    if not form.is_valid():
        return None
    return checkpoint_interval_proposal_for_spec(**form.proposal_inputs(), team=team)


@login_required
@require_POST
def checkpoint_interval_partial(request: SignedInRequest) -> HttpResponse:
    """htmx: the checkpoint interval proposed for the submit form's fields as typed so far, for the chosen team."""
    teams, _ = _submit_context(request)
    proposal = _proposal(request.POST, request.POST.get("team"), teams)
    return render(request, "jobs/partials/checkpoint_proposal.html", {"proposal": proposal})


@login_required
@require_POST
def suggest_partial(request: SignedInRequest) -> HttpResponse:
    """htmx: the right-sizing suggestion for the request fields of the submit form as typed so far."""
    teams, _ = _submit_context(request)
    form = SuggestionForm(request.POST, teams=teams)
    suggestion = _suggestion(form)
    context = {"suggestion": suggestion, "request_form": form, "fabric_warning": fabric_warning(suggestion)}
    return render(request, "jobs/partials/suggestion.html", context)


@login_required
@require_GET
def queue(request: SignedInRequest) -> HttpResponse:
    """Pending jobs of the user's teams with positions, ETA and why each waits; htmx polls the table."""
    jobs = job_list_queue(user=request.user)
    filters = QueueFilter(request.GET, queryset=jobs, request=request)
    filtered = filters.qs if filters.is_valid() else jobs.none()
    page = Paginator(filtered, QUEUE_PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "filters": filters,
        "page": page,
        "no_position": NO_POSITION_YET,
        "teams": team_list_for_user(user=request.user).order_by("name"),
        "query": request.GET.urlencode(),
        "now": timezone.now(),
    }
    template = "jobs/partials/queue_table.html" if request.htmx else "jobs/queue.html"
    return render(request, template, context)


@login_required
@require_GET
def detail(request: SignedInRequest, job_id: int) -> HttpResponse:
    job, role = _job_for(request, job_id)
    events = list(job_events(job=job))
    live = job.state in (JobState.PENDING, JobState.RUNNING)
    # The preempting jobs as this viewer may name them: team and kind always, a link only to a job they may see.
    preemptors = preemptors_for_user(user=request.user, events=events)
    history = None
    if not request.htmx:  # the status poll (htmx) redraws only the status: the lists of the page stay as they are
        history = job_history(events=events, allocations=list(job_allocations(job=job)), preemptors=preemptors)
    context = {
        "job": job,
        "role": role,
        "history": history,
        "preemptions": preemption_count(events, preemptors),
        "usage": job_usage(job=job),
        "no_position": NO_POSITION_YET,
        "can_cancel": live and access.can_cancel(user=request.user, job=job, role=role),
        "can_manage": live and access.can_manage(role),
        "priority_form": PriorityForm(
            initial={"priority": job.priority}, allowed=access.priorities_offered(role, job.team, job.kind)
        ),
        "cancel_form": CancelForm(),
        "spec_json": _submitted_spec(events),
        # The status poll (htmx) redraws only the status: no proposal to compute for it.
        "proposal": None if request.htmx else _job_proposal(job),
        "network": None if request.htmx else job_network(job=job),
        "node_request": None if request.htmx else job_node_request(job=job),
        "moves": [] if request.htmx else job_moves(job=job, events=events),
        # The status poll redraws only the status; the log has a poll of its own (job_logs).
        "log_panel": None if request.htmx else _log_panel(request, job),
    }
    template = "jobs/partials/job_status.html" if request.htmx else "jobs/detail.html"
    return render(request, template, context)


def _log_panel(request: HttpRequest, job: Job) -> Any:
    """Replica ``?replica=`` of the page's URL (a bookmark, or the replica form without htmx); replica 0 when
    the parameter is not one the job has: the page itself is never refused for it."""
    try:
        replica, _tail = log_params({"replica": request.GET.get("replica", "")}, job=job)
    except LogRequestInvalid:
        replica = 0
    return job_log_panel(job=job, replica=replica)


@login_required
@require_GET
def job_logs(request: SignedInRequest, job_id: int) -> HttpResponse:
    """htmx: one replica's log panel (``?replica=``), polled while the job may still run."""
    job, _role = _job_for(request, job_id)
    try:
        replica, _tail = log_params({"replica": request.GET.get("replica", "")}, job=job)
    except LogRequestInvalid as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    context = {"job": job, "log_panel": job_log_panel(job=job, replica=replica)}
    return render(request, "jobs/partials/job_logs.html", context)


@login_required
@require_GET
def job_logs_download(request: SignedInRequest, job_id: int) -> HttpResponse:
    """One replica's log as a text file: the last ``?tail=`` lines (up to the longest tail a read gives), at
    most ``DOWNLOAD_LIMIT_BYTES``."""
    job, _role = _job_for(request, job_id)
    query = {"replica": request.GET.get("replica", ""), "tail": request.GET.get("tail", "")}
    try:
        replica, tail = log_params(query, job=job, default_tail=MAX_TAIL_LINES)
    except LogRequestInvalid as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    try:
        log = job_log_read(job=job, replica=replica, tail_lines=tail, limit_bytes=DOWNLOAD_LIMIT_BYTES)
    except GatewayError as exc:
        message = f"The log of replica {replica} cannot be read right now ({exc}); try again in a minute.\n"
        return HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    response = HttpResponse(log.text, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{download_name(job, replica)}"'
    return response


def _job_proposal(job: Job) -> IntervalProposal | None:
    """The checkpoint interval proposed for ``job``; None for a service that does not checkpoint."""
    if job.kind == JobKind.INFERENCE and not job.checkpoint_interval_s:
        return None
    return checkpoint_interval_proposal(job=job)


def _submitted_spec(events: list[Any]) -> str:
    """The spec as submitted (from the ``submitted`` event), pretty-printed; empty when unknown."""
    for event in events:
        if event.type == EventType.SUBMITTED and isinstance(event.details, dict) and "spec" in event.details:
            return json.dumps(event.details["spec"], indent=2, sort_keys=True)
    return ""


@login_required
@require_POST
def cancel(request: SignedInRequest, job_id: int) -> HttpResponse:
    job, role = _job_for(request, job_id)
    if not access.can_cancel(user=request.user, job=job, role=role):
        return HttpResponseForbidden("Only the team's lead or the job's submitter can cancel it.")
    form = CancelForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        job_cancel(job=job, actor=request.user, reason=reason or f"cancelled by {request.user}")
    except JobsError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Cancelled {job.name}.")
    return redirect("jobs:detail", job_id=job.pk)


@login_required
@require_POST
def set_priority(request: SignedInRequest, job_id: int) -> HttpResponse:
    job, role = _job_for(request, job_id)
    if not access.can_manage(role):
        return HttpResponseForbidden("Only the team's lead can change a job's priority.")
    form = PriorityForm(request.POST, allowed=access.priorities_allowed(role))
    if not form.is_valid():
        messages.error(request, "Choose one of the priorities offered.")
    else:
        try:
            job_set_priority(job=job, priority=form.cleaned_data["priority"], actor=request.user)
        except JobsError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"{job.name} now has {form.cleaned_data['priority']} priority.")
    return redirect(_same_site(request, request.POST.get("next")) or reverse("jobs:detail", args=[job.pk]))


def _same_site(request: HttpRequest, target: str | None) -> str | None:
    """``target`` when it is a path or URL of this site (over HTTPS when the request is), else None: a ``next``
    from a form must not send the reader on to another site (``https://evil.example``, ``//evil.example``,
    ``javascript:``)."""
    if not target:
        return None
    # A URL, or a path from the site's root: redirect() would read a bare word ("9999") as a view to reverse.
    rooted = target.startswith("/") or bool(urlsplit(target).scheme)
    if rooted and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


@login_required
@require_http_methods(["GET", "POST"])
def manage(request: SignedInRequest, slug: str) -> HttpResponse:
    """The lead's page: reorder the team's pending jobs, change priorities, cancel several at once."""
    team, role = _team_for(request, slug)
    if not access.can_manage(role):
        return render(request, "jobs/forbidden.html", {"team": team, "what": "manage the team's queue"}, status=403)
    pending = _team_order(request, team)
    if request.method == "POST":
        _manage_post(request, team, role, pending)
        return redirect("jobs:manage", slug=team.slug)
    return render(
        request,
        "jobs/manage.html",
        {
            "team": team,
            "jobs": pending,
            "priorities": access.priorities_offered(role, team),
            "no_position": NO_POSITION_YET,
        },
    )


def _manage_post(request: SignedInRequest, team: Team, role: str, pending: list[Job]) -> None:
    action = request.POST.get("action", "")
    selected = _ids(request.POST.getlist("selected"))
    try:
        if action.startswith(("up:", "down:")):
            direction, _, raw = action.partition(":")
            moved = _ids([raw])
            job = next((j for j in pending if moved and j.pk == moved[0]), None)
            if job is None:
                raise JobSpecInvalid(["that job is no longer pending in this team"])
            job_move(job=job, up=direction == "up", actor=request.user)
            messages.success(request, _moved_message(request, team, pending, job.pk))
        elif action == "priority":
            priority = request.POST.get("priority", "")
            if priority not in access.priorities_allowed(role):
                raise JobSpecInvalid([f"priority: choose one of {', '.join(access.priorities_allowed(role))}"])
            jobs = job_set_priority_bulk(jobs=_selected(request, team, selected), priority=priority, actor=request.user)
            messages.success(request, f"Set {priority} priority on {len(jobs)} job{'s' if len(jobs) != 1 else ''}.")
        elif action == "cancel":
            jobs = _selected(request, team, selected)
            job_cancel_bulk(jobs=jobs, actor=request.user, reason=f"cancelled by {request.user} (bulk)")
            messages.success(request, f"Cancelled {len(jobs)} job{'s' if len(jobs) != 1 else ''}.")
        else:
            messages.error(request, "Choose an action: move a job, set a priority, or cancel the selected jobs.")
    except (JobsError, JobStateError) as exc:
        messages.error(request, str(exc))


def _moved_message(request: SignedInRequest, team: Team, before: list[Job], job_id: int) -> str:
    """What a move did, told as the team's order now has it: one job moved, whatever ranks were rewritten."""
    after = _team_order(request, team)
    job = next(j for j in before if j.pk == job_id)
    old = [j.pk for j in before].index(job_id) + 1
    new = next((i for i, j in enumerate(after, start=1) if j.pk == job_id), None)
    if new is None:
        return f"{job.name} is no longer pending in this team."
    if new == old:
        return (
            f"{job.name} stays #{new} in the team's order: priority comes first, and within it a job resuming "
            "after a lost node; change its priority to move it past those jobs."
        )
    row = after[new - 1]
    cluster = f", #{row.queue_position} in the cluster queue" if row.queue_position else ""
    return f"Moved {job.name} {'up' if new < old else 'down'} to #{new} in the team's order{cluster}."


def _team_order(request: SignedInRequest, team: Team) -> list[Job]:
    """The team's pending jobs in the order the engine takes them within the team."""
    queued = list(job_list_queue(user=request.user, team=team))
    resuming = resuming_jobs(job.pk for job in queued)
    return sorted(queued, key=lambda job: team_order_key(job, resuming))


def _ids(values: list[str]) -> list[int]:
    # ASCII digits only ("²" is a digit to str.isdigit and not to int), at most the id column's 19 digits.
    return [int(v) for v in values if v.isascii() and v.isdigit() and len(v) <= 18]


def _selected(request: HttpRequest, team: Team, ids: list[int]) -> list[Job]:
    if not ids:
        raise JobSpecInvalid(["select at least one job first"])
    jobs = jobs_for_user_by_ids(user=request.user, job_ids=ids, team=team)
    if len(jobs) != len(set(ids)):
        raise JobSpecInvalid(["some selected jobs are not jobs of this team"])
    return jobs
