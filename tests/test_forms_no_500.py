"""Every form of the portal and the admin's sign-in, walked with the refusals its service can raise: each one
reaches the page as a form error or a message, with a 200 or a 4xx, never a 500.

Two kinds of walk: real refusals (the pending caps, an over-long username, a job that ended, a future month…)
through the real services; and, for each view that calls a jobs or billing service, every typed error of that
app injected in place of the service, so a refusal added to ``<app>/errors.py`` later is shown too. A last test
lists the project's form classes and fails on one that no walk covers.
"""

from __future__ import annotations

import html
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django import forms
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import billing.forms
import jobs.errors
import jobs.pages.forms
import portal.signin  # noqa: F401  (its forms are walked)
import scheduler.admin  # noqa: F401
import teams.admin  # noqa: F401
from billing.errors import AdvisorInputError
from jobs.errors import JobsError
from jobs.models import Job
from tests.factories import JobFactory, TeamFactory, UserFactory
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-enough-password-1"
NOW = timezone.now()


def shows(response: HttpResponse, message: str) -> None:
    """``response`` is a page (200) or a refusal (4xx), never a server error, and says ``message``."""
    assert 200 <= response.status_code < 500, response.status_code
    body = html.unescape(response.content.decode())
    assert message in body, f"{message!r} not on the page ({response.status_code})"


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def signed_in(client: Client, lead: User) -> Client:
    client.force_login(lead)
    return client


# -- real refusals, through the real services -------------------------------------------------------------


def test_submit_at_the_team_s_pending_cap_is_a_form_error(signed_in: Client, team, node, settings) -> None:
    settings.JOBS = {**settings.JOBS, "pending_limit_team": 1, "pending_limit_user": 10}
    JobFactory(team=team, state="pending")
    response = signed_in.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk})
    shows(response, "team nlp already has 1 pending jobs, its limit")
    assert response.context["form"].non_field_errors()
    assert Job.objects.count() == 1


def test_submit_at_the_user_s_pending_cap_is_a_form_error(signed_in: Client, lead, team, node, settings) -> None:
    settings.JOBS = {**settings.JOBS, "pending_limit_team": 10, "pending_limit_user": 1}
    JobFactory(team=team, state="pending", submitted_by=lead)
    shows(signed_in.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk}), "you already have 1 pending jobs")


def test_submit_refusals_of_the_spec_and_the_grant_are_form_errors(signed_in: Client, team, node) -> None:
    unknown = signed_in.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "project": "nope"})
    shows(unknown, "has no project 'nope'")
    production = signed_in.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "priority": "production"})
    assert production.status_code == 200 and "priority" in production.context["form"].errors


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
@pytest.mark.parametrize("length", [151, 256, 300, 10_000])
def test_an_over_long_username_is_a_form_error_on_both_sign_ins(client: Client, url: str, length: int) -> None:
    """The username reached django-axes, whose ``varchar(255)`` made PostgreSQL answer 500 (portal/signin.py)."""
    response = client.post(url, {"username": "u" * length, "password": "x"})
    shows(response, "A username has at most 150 characters")
    from axes.models import AccessAttempt

    assert not AccessAttempt.objects.exists()  # refused before authenticate(): nothing for axes to count


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_username_of_the_longest_length_still_signs_in(client: Client, url: str) -> None:
    UserFactory(username="u" * 150, password=PASSWORD, is_staff=True)
    response = client.post(url, {"username": "u" * 150, "password": PASSWORD})
    assert response.status_code == 302


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_wrong_password_and_a_lockout_are_shown_on_the_sign_in_page(client: Client, url: str, settings) -> None:
    UserFactory(username="eve", password=PASSWORD, is_staff=True)
    shows(client.post(url, {"username": "eve", "password": "wrong"}), "correct username")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        locked = client.post(url, {"username": "eve", "password": "wrong"})
    assert locked.status_code == 429
    shows(locked, "Too many failed sign-ins")


def test_password_change_refusals_are_form_errors(client: Client) -> None:
    client.force_login(UserFactory(username="eve", password=PASSWORD))
    data = {"old_password": "wrong", "new_password1": "x", "new_password2": "y"}
    shows(client.post(reverse("password_change"), data), "Your old password was entered incorrectly")


def test_api_token_page_revoke_without_a_token_says_so(signed_in: Client) -> None:
    shows(signed_in.post(reverse("api_token_revoke"), follow=True), "You had no token to revoke")
    shows(signed_in.post(reverse("api_token")), "")  # making one has no refusal: a page, not a 500


def test_job_changes_on_an_ended_job_are_messages(signed_in: Client, team, lead) -> None:
    ended = JobFactory(
        team=team, state="completed", submitted_at=NOW, started_at=NOW, finished_at=NOW, submitted_by=lead
    )
    cancel = signed_in.post(reverse("jobs:cancel", args=[ended.pk]), follow=True)
    shows(cancel, "only pending or running jobs can be cancelled")
    priority = signed_in.post(reverse("jobs:priority", args=[ended.pk]), {"priority": "low"}, follow=True)
    shows(priority, "only pending or running jobs can change")


def test_manage_page_refusals_are_messages(signed_in: Client, team) -> None:
    url = reverse("jobs:manage", args=[team.slug])
    other = JobFactory(team=TeamFactory(slug="other", namespace="team-other"), state="pending")
    shows(signed_in.post(url, {"action": "up:999999"}, follow=True), "no longer pending in this team")
    shows(signed_in.post(url, {"action": "cancel"}, follow=True), "select at least one job first")
    data = {"action": "cancel", "selected": [other.pk]}
    shows(signed_in.post(url, data, follow=True), "some selected jobs are not jobs of this team")
    data = {"action": "priority", "priority": "urgent", "selected": [other.pk]}
    shows(signed_in.post(url, data, follow=True), "priority: choose one of")
    shows(signed_in.post(url, {"action": "dance"}, follow=True), "Choose an action")


def test_jobs_page_bulk_cancel_refusals_are_messages(signed_in: Client, team) -> None:
    url = reverse("jobs:list")
    shows(signed_in.post(url, {"action": "cancel"}, follow=True), "select at least one job first")
    shows(signed_in.post(url, {"action": "cancel", "selected": ["999999"]}, follow=True), "not jobs of your teams")
    ended = JobFactory(team=team, state="completed", submitted_at=NOW, started_at=NOW, finished_at=NOW)
    data = {"action": "cancel", "selected": [ended.pk]}
    shows(signed_in.post(url, data, follow=True), "only pending or running jobs can be cancelled")


def test_filters_and_partials_refuse_without_a_500(signed_in: Client, team, lead) -> None:
    assert signed_in.get(reverse("jobs:list"), {"state": "nonsense", "page": "x"}).status_code == 200
    assert signed_in.get(reverse("jobs:queue"), {"team": "x" * 300, "priority": "?"}).status_code == 200
    suggestion = signed_in.post(reverse("jobs:suggest"), {**SUBMIT, "params_b": "-1", "replicas": "x"})
    assert suggestion.status_code == 200
    interval = signed_in.post(reverse("jobs:checkpoint_interval"), {"team": "999999", "replicas": "-1"})
    assert interval.status_code == 404
    job = JobFactory(team=team, state="running", submitted_at=NOW, started_at=NOW, submitted_by=lead)
    shows(signed_in.get(reverse("jobs:logs", args=[job.pk]), {"replica": "99"}), "replica")
    shows(signed_in.get(reverse("jobs:logs_download", args=[job.pk]), {"tail": "-5"}), "tail")


def test_billing_forms_refusals_are_form_errors(client: Client, finance_user) -> None:
    client.force_login(finance_user)
    shows(client.get(reverse("billing:reports"), {"month": "2099-01"}), "2099-01")
    shows(client.get(reverse("billing:reports"), {"month": "soon"}), "is not a month")
    download = client.get(reverse("billing:download"), {"month": "soon", "format": "pdf", "file": "all"})
    assert download.status_code == 400
    shows(download, "format 'pdf' is not offered")
    advisor = client.get(reverse("billing:advisor"), {"gpu_model": "B300", "history_days": "0", "pue": "0"})
    assert advisor.status_code == 400
    shows(advisor, "History must be from 1 to 366 days")


def test_team_settings_refusals_are_form_errors(client: Client, platform_admin, team) -> None:
    """The team's settings are the admin's Team form (a lead has none of their own)."""
    client.force_login(platform_admin)
    data = {
        "name": "Clash",
        "slug": team.slug,
        "namespace": "team-" + "n" * 300,
        "weight": "-1",
        "max_priority": "production",
        "production_kinds": ["dreaming"],
        **{f"{prefix}-{key}": "0" for prefix in ("projects", "memberships", "quotas") for key in ("TOTAL_FORMS",)},
        **{f"{prefix}-INITIAL_FORMS": "0" for prefix in ("projects", "memberships", "quotas")},
    }
    response = client.post(reverse("admin:teams_team_add"), data)
    shows(response, "already exists")


# -- every typed error of the app, injected in place of each service a form calls -------------------------


def _subclasses(base: type[Exception]) -> Iterator[type[Exception]]:
    for cls in base.__subclasses__():
        yield cls
        yield from _subclasses(cls)


def _refusal(cls: type[Exception]) -> tuple[Exception, str]:
    """An instance of ``cls`` whatever its constructor takes, and the words it must show."""
    words = f"refused by {cls.__name__} so do something else"
    parameters = list(inspect.signature(cls.__init__).parameters)
    if parameters[1:2] == ["errors"]:
        # A list of spec problems, or a dict of problems per field (CheckpointInvalid, LogRequestInvalid).
        takes_dict = "dict" in str(inspect.signature(cls.__init__).parameters["errors"].annotation)
        return cls({"field": [words]} if takes_dict else [words]), words
    return cls(words), words


JOBS_ERRORS = sorted({JobsError, *_subclasses(JobsError)}, key=lambda cls: cls.__name__)


def _pending(team: Any, lead: User) -> Job:
    return JobFactory(team=team, state="pending", submitted_by=lead, priority="normal")


# (view module attribute to replace, request to send): each request reaches that service.
JOB_FORMS: dict[str, tuple[str, Callable[[Any, User], tuple[str, dict[str, Any]]]]] = {
    "submit": ("jobs.pages.views.job_submit", lambda team, lead: (reverse("jobs:submit"), {**SUBMIT, "team": team.pk})),
    "cancel": (
        "jobs.pages.views.job_cancel",
        lambda team, lead: (reverse("jobs:cancel", args=[_pending(team, lead).pk]), {}),
    ),
    "priority": (
        "jobs.pages.views.job_set_priority",
        lambda team, lead: (reverse("jobs:priority", args=[_pending(team, lead).pk]), {"priority": "low"}),
    ),
    "manage move": (
        "jobs.pages.views.job_move",
        lambda team, lead: (reverse("jobs:manage", args=[team.slug]), {"action": f"up:{_pending(team, lead).pk}"}),
    ),
    "manage priority": (
        "jobs.pages.views.job_set_priority_bulk",
        lambda team, lead: (
            reverse("jobs:manage", args=[team.slug]),
            {"action": "priority", "priority": "low", "selected": [_pending(team, lead).pk]},
        ),
    ),
    "manage cancel": (
        "jobs.pages.views.job_cancel_bulk",
        lambda team, lead: (
            reverse("jobs:manage", args=[team.slug]),
            {"action": "cancel", "selected": [_pending(team, lead).pk]},
        ),
    ),
    "jobs page cancel": (
        "jobs.pages.job_list.job_cancel_bulk",
        lambda team, lead: (reverse("jobs:list"), {"action": "cancel", "selected": [_pending(team, lead).pk]}),
    ),
}


# Refusals a view words itself, because the service's words are for an API client (send a new key) and the page's
# reader did not choose the key: the submit page's own key (jobs.idempotency).
OWN_WORDS = {
    ("submit", "IdempotencyKeyReused"): "already submitted with other values",
    ("submit", "IdempotencyKeyInFlight"): "being submitted already",
}


@pytest.mark.parametrize("error", JOBS_ERRORS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("form", list(JOB_FORMS))
def test_every_jobs_refusal_reaches_every_jobs_form(
    signed_in: Client, team, lead, node, monkeypatch, form: str, error: type[Exception]
) -> None:
    target, request = JOB_FORMS[form]
    instance, words = _refusal(error)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise instance

    monkeypatch.setattr(target, refuse)
    url, data = request(team, lead)
    shows(signed_in.post(url, data, follow=True), OWN_WORDS.get((form, error.__name__), words))


@pytest.mark.parametrize("service", ["procurement_advise", "breakeven"])
def test_an_advisor_refusal_is_a_form_error(client: Client, finance_user, monkeypatch, service: str) -> None:
    client.force_login(finance_user)
    instance, words = _refusal(AdvisorInputError)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise instance

    monkeypatch.setattr("billing.views.ledger_gpu_models", lambda: ["A100-SXM4-80GB"])
    monkeypatch.setattr(f"billing.views.{service}", refuse)
    params = {**billing.forms.BreakevenForm.initial_values(), "gpu_model": "A100-SXM4-80GB", "history_days": 30}
    response = client.get(reverse("billing:advisor"), {**params, "purchase_unit_gpus": 8})
    assert response.status_code == 400
    shows(response, words)


# -- no form left out ---------------------------------------------------------------------------------------

# Each form class of the project and the test that walks its refusals (here, or beside its app).
WALKED = {
    "jobs.pages.forms.SubmitForm": "test_submit_* and test_every_jobs_refusal_reaches_every_jobs_form[submit-*]",
    "jobs.pages.forms.RequestForm": "the fields of SubmitForm and SuggestionForm",
    "jobs.pages.forms.SuggestionForm": "test_filters_and_partials_refuse_without_a_500",
    "jobs.pages.forms.IntervalForm": "test_filters_and_partials_refuse_without_a_500",
    "jobs.pages.forms.PriorityForm": "test_job_changes_on_an_ended_job_are_messages, …[priority-*]",
    "jobs.pages.forms.CancelForm": "test_job_changes_on_an_ended_job_are_messages, …[cancel-*]",
    "billing.forms.ReportForm": "test_billing_forms_refusals_are_form_errors",
    "billing.forms.AdvisorForm": "test_billing_forms_refusals_are_form_errors, test_an_advisor_refusal_is_a_form_error",
    "billing.forms.BreakevenForm": "test_an_advisor_refusal_is_a_form_error[breakeven]",
    "portal.signin.SignInForm": "test_an_over_long_username_*, test_a_wrong_password_and_a_lockout_*",
    "portal.signin.AdminSignInForm": "test_an_over_long_username_*, test_a_wrong_password_and_a_lockout_*",
    "portal.signin._UsernameLength": "the base of both sign-in forms",
    "teams.admin.TeamAdminForm": "test_team_settings_refusals_are_form_errors",
    "jobs.admin.JobAdminForm": "tests/jobs/test_services_grants.py (a grant refused at the kind)",
    "scheduler.admin.NodeForm": "tests/test_admin_nodes.py (InventoryError as the form's error)",
    "scheduler.admin.GpuForm": "tests/test_admin_nodes.py (InventoryError as the form's error)",
}


def _forms(base: type) -> Iterator[type]:
    for cls in base.__subclasses__():
        yield cls
        yield from _forms(cls)


def test_every_form_of_the_project_is_walked() -> None:
    """Every form class loaded from the project's apps (the admin's included: the URLconf loads it)."""
    import portal.urls  # noqa: F401  (the admin's registrations, and with them its forms)

    apps = ("jobs", "billing", "portal", "teams", "scheduler", "audit", "demo")
    found = {
        f"{cls.__module__}.{cls.__name__}" for cls in _forms(forms.BaseForm) if cls.__module__.split(".")[0] in apps
    }
    assert found - set(WALKED) == set(), "a form without a walk of its refusals: add one here"
    assert set(WALKED) - found == set(), "a walk of a form that is gone"
    assert {cls.__name__ for cls in JOBS_ERRORS} == {
        name for name, cls in vars(jobs.errors).items() if isinstance(cls, type) and issubclass(cls, JobsError)
    }
