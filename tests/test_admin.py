"""The platform admin: every registered model's pages, who may see them, the view-only audit rows, form errors
that must not be 500s, and the node actions.

Most tests iterate ``admin.site._registry`` so a newly registered model is covered, or fails loudly until it has
a builder in ``_BUILDERS``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from auditlog.models import LogEntry
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import connection
from django.db.models import Model
from django.forms import BaseForm, CheckboxInput, MultiWidget
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from pytest_django.asserts import assertContains
from rest_framework.authtoken.models import Token, TokenProxy

from billing.models import GpuPrice, LedgerEntry, LostWork, ProductionWait, ReservedCommitment
from jobs.models import Allocation, Job, JobEvent
from scheduler.autoscaled import AutoscaledPool, NodeRequest, OnDemandBudget
from scheduler.core.gpus.catalog import GPU_MODELS
from scheduler.models import Gpu, GpuModel, Node
from teams.admin import MicrocosmUserAdmin, UserMembershipInline
from teams.models import Membership, Project, Quota, SsoGroup, Team
from tests.factories import (
    AllocationFactory,
    GpuFactory,
    GpuModelFactory,
    JobEventFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    ProjectFactory,
    QuotaFactory,
    TeamFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

User = get_user_model()

DOMAIN_MODELS: set[type[Model]] = {
    Team,
    Project,
    Membership,
    Quota,
    SsoGroup,
    GpuModel,
    Node,
    Gpu,
    Job,
    JobEvent,
    Allocation,
    LedgerEntry,
    LostWork,
    GpuPrice,
    ReservedCommitment,
}
# Rows that only services and the scheduler write; the admin shows them and nothing more.
# The audit trail (audit/) is read-only too: its rows are written by the changes they record.
VIEW_ONLY_MODELS: set[type[Model]] = {
    JobEvent,
    Allocation,
    LedgerEntry,
    LostWork,
    ProductionWait,
    LogEntry,
    NodeRequest,  # what the loop asked of the autoscaled pools: a record the loop writes
}

REGISTERED: list[type[Model]] = sorted(admin.site._registry, key=lambda m: m._meta.label)
MODEL_IDS = [m._meta.label for m in REGISTERED]
EDITABLE = [m for m in REGISTERED if m not in VIEW_ONLY_MODELS]


# --- builders: one independent, realistic row per call (related rows included, so inlines have content) -------

_counter = itertools.count()


def _job(**kwargs: Any) -> Job:
    project = ProjectFactory()
    return JobFactory(team=project.team, project=project, **kwargs)


def _build_team() -> Team:
    team = TeamFactory()
    ProjectFactory(team=team)
    MembershipFactory(team=team, role="lead")
    QuotaFactory(team=team)
    return team


def _build_gpu_model() -> GpuModel:
    # GpuModelFactory gets-or-creates by name, so each call takes a catalog model not yet in the database.
    taken = set(GpuModel.objects.values_list("name", flat=True))
    spec = next(s for s in GPU_MODELS if s.name not in taken)
    return GpuModelFactory(
        name=spec.name, gpu_class=spec.gpu_class, memory_mib=spec.memory_mib, mig_capable=spec.mig_capable
    )


def _build_node() -> Node:
    node = NodeFactory()
    GpuFactory(node=node, index=0, mig_layout=[["3g.40gb", 0], ["3g.40gb", 4]])
    GpuFactory(node=node, index=1)
    return node


def _build_job() -> Job:
    submitter = UserFactory()
    job = _job(submitted_by=submitter)
    JobEventFactory(job=job, actor=submitter, details={"note": "by hand"})
    AllocationFactory(job=job)
    return job


def _build_ledger_entry() -> LedgerEntry:
    allocation = AllocationFactory(job=_job())
    return LedgerEntry.objects.create(
        allocation=allocation,
        team=allocation.job.team,
        project=allocation.job.project,
        interval_start=allocation.started_at,
        interval_end=allocation.started_at + timedelta(hours=1),
        gpu_hours=Decimal("1.000000"),
        tier=allocation.tier,
        price_per_gpu_hour=allocation.price_per_gpu_hour,
        cost=allocation.price_per_gpu_hour,
    )


def _build_lost_work() -> LostWork:
    started = timezone.now() - timedelta(hours=1)
    allocation = AllocationFactory(
        job=_job(), started_at=started, ended_at=started + timedelta(minutes=30), end_reason="node-lost"
    )
    return LostWork.objects.create(
        allocation=allocation,
        job=allocation.job,
        team=allocation.job.team,
        gpu_model=allocation.node.gpu_model.name,
        tier=allocation.tier,
        reason="node-lost",
        preempted_at=allocation.ended_at,
        lost_s=Decimal("600.000000"),
        gpu_hours=Decimal("0.166667"),
        price_per_gpu_hour=allocation.price_per_gpu_hour,
        cost=Decimal("0.350000"),
    )


def _build_gpu_price() -> GpuPrice:
    return GpuPrice.objects.create(
        gpu_model=_build_gpu_model(),
        tier="spot",
        price_per_gpu_hour=Decimal("1.1650"),
        effective_from=timezone.now().date(),
        source="test",
    )


def _build_commitment() -> ReservedCommitment:
    return ReservedCommitment.objects.create(
        name=f"commitment-{next(_counter)}",
        gpu_model=_build_gpu_model(),
        gpu_count=8,
        term_months=12,
        monthly_price=Decimal("13000.00"),
        start=timezone.now().date(),
    )


def _build_pool() -> AutoscaledPool:
    name = f"pool-{next(_counter)}"
    return AutoscaledPool.objects.create(
        name=name,
        node_selector={"cloud.google.com/gke-nodepool": name},
        gpu_model=_build_gpu_model(),
        gpus_per_node=8,
        max_nodes=4,
    )


def _build_node_request() -> NodeRequest:
    now = timezone.now()
    return NodeRequest.objects.create(
        job=_job(),
        pool=_build_pool(),
        nodes=2,
        gpus_per_node=8,
        gpu_hours=Decimal("26.400"),
        requested_at=now,
        state_since=now,
        arrives_at=now + timedelta(minutes=9),
        message="Capacity is not found, CA will try to find it later.",
    )


_BUILDERS: dict[type[Model], Callable[[], Model]] = {
    AutoscaledPool: _build_pool,
    NodeRequest: _build_node_request,
    # One row, the cluster's (its name is fixed): every call gives that row.
    OnDemandBudget: lambda: OnDemandBudget.objects.get_or_create(defaults={"gpu_hours_per_day": Decimal("500")})[0],
    Team: _build_team,
    Project: ProjectFactory,
    Membership: MembershipFactory,
    Quota: QuotaFactory,
    SsoGroup: lambda: SsoGroup.objects.create(group=f"group-{next(_counter)}", team=_build_team(), role="lead"),
    GpuModel: _build_gpu_model,
    Node: _build_node,
    Gpu: lambda: GpuFactory(node=NodeFactory(), index=0),
    Job: _build_job,
    JobEvent: lambda: JobEventFactory(job=_job(), actor=UserFactory()),
    Allocation: lambda: AllocationFactory(job=_job()),
    LedgerEntry: _build_ledger_entry,
    LostWork: _build_lost_work,
    ProductionWait: lambda: ProductionWait.objects.create(
        at=timezone.now(),
        gpu_class="H100",
        cause="burst",
        team=_build_team(),
        gpu_units=7000,
        scope="H100",
        need_units=7000,
        jobs=1,
        seconds=10,
    ),
    GpuPrice: _build_gpu_price,
    ReservedCommitment: _build_commitment,
    User: lambda: MembershipFactory().user,
    LogEntry: lambda: LogEntry.objects.get_for_object(QuotaFactory()).latest("timestamp"),
    Group: lambda: Group.objects.create(name=f"group-{next(_counter)}"),
    # API tokens: platform admins revoke them in the admin.
    TokenProxy: lambda: TokenProxy.objects.get(key=Token.objects.create(user=UserFactory()).key),
    # Sign-in lockout (django-axes, docs/security.md): a platform admin unlocks by deleting the attempt.
    AccessAttempt: lambda: AccessAttempt.objects.create(
        username=f"guesser-{next(_counter)}",
        ip_address="203.0.113.9",
        user_agent="curl/8",
        get_data="",
        post_data="username=guesser",
        http_accept="*/*",
        path_info="/accounts/login/",
        failures_since_start=5,
    ),
    AccessLog: lambda: AccessLog.objects.create(
        username=f"signed-in-{next(_counter)}",
        ip_address="203.0.113.9",
        user_agent="curl/8",
        http_accept="*/*",
        path_info="/accounts/login/",
    ),
    AccessFailureLog: lambda: AccessFailureLog.objects.create(
        username=f"guesser-{next(_counter)}",
        ip_address="203.0.113.9",
        user_agent="curl/8",
        http_accept="*/*",
        path_info="/accounts/login/",
        locked_out=True,
    ),
}


def _build(model: type[Model]) -> Model:
    builder = _BUILDERS.get(model)
    assert builder is not None, f"{model._meta.label} is registered in the admin: add a builder to _BUILDERS"
    return builder()


# --- helpers ---------------------------------------------------------------------------------------------------


def _url(model: type[Model], view: str, *args: object) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def _model_admin(model: type[Model]) -> admin.ModelAdmin:
    return admin.site._registry[model]


def _request_as(user: AbstractBaseUser) -> Any:
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def _form_data(response: HttpResponse) -> dict[str, Any]:
    """What a browser submits from an admin change page when the person changes nothing."""
    forms: list[BaseForm] = [response.context["adminform"].form]
    for inline_admin_formset in response.context["inline_admin_formsets"]:
        forms.append(inline_admin_formset.formset.management_form)
        forms.extend(inline_admin_formset.formset.forms)
    data: dict[str, Any] = {"_save": "Save"}
    for form in forms:
        for bound in form:
            if bound.field.disabled:
                continue
            # Related fields are wrapped for the add/change icons; the wrapped widget decides the encoding.
            widget = getattr(bound.field.widget, "widget", bound.field.widget)
            value = bound.value()
            if isinstance(widget, MultiWidget):  # split date and time
                for i, part in enumerate(widget.decompress(value)):
                    data[f"{bound.html_name}_{i}"] = "" if part is None else part
            elif isinstance(widget, CheckboxInput):
                if value:
                    data[bound.html_name] = "on"
            elif isinstance(value, list | tuple):
                data[bound.html_name] = [str(v) for v in value]
            else:
                data[bound.html_name] = "" if value is None else value
    return data


def _form_errors(response: HttpResponse) -> list[object]:
    """Every error on a re-rendered change form, for assertion messages."""
    if response.context is None or "adminform" not in response.context:
        return []
    errors: list[object] = [response.context["adminform"].form.errors]
    errors += [f.formset.errors for f in response.context["inline_admin_formsets"]]
    errors += [f.formset.non_form_errors() for f in response.context["inline_admin_formsets"]]
    return errors


@pytest.fixture
def staff_client(client: Client, platform_admin: AbstractBaseUser) -> Client:
    client.force_login(platform_admin)
    return client


# --- registration ------------------------------------------------------------------------------------------------


def test_every_domain_model_is_registered() -> None:
    assert not DOMAIN_MODELS - set(admin.site._registry), "unregistered domain models"


def test_user_admin_shows_memberships() -> None:
    user_admin = _model_admin(User)
    assert isinstance(user_admin, MicrocosmUserAdmin)
    assert UserMembershipInline in user_admin.inlines


def test_view_only_admins_are_exactly_the_audit_rows(platform_admin: AbstractBaseUser) -> None:
    request = _request_as(platform_admin)
    view_only = {
        model
        for model, model_admin in admin.site._registry.items()
        if not model_admin.has_change_permission(request)
        and not model_admin.has_add_permission(request)
        and not model_admin.has_delete_permission(request)
        and model_admin.has_view_permission(request)
    }
    assert view_only == VIEW_ONLY_MODELS


# --- every registered model: pages load for staff --------------------------------------------------------------


@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_changelist_loads(staff_client: Client, model: type[Model]) -> None:
    obj = _build(model)
    response = staff_client.get(_url(model, "changelist"))
    assert response.status_code == 200
    assert obj in response.context["cl"].result_list


@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_changelist_search_loads(staff_client: Client, model: type[Model]) -> None:
    _build(model)
    response = staff_client.get(_url(model, "changelist"), {"q": "x"})
    assert response.status_code == 200


@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_changelist_every_filter_choice_loads(staff_client: Client, model: type[Model]) -> None:
    # Two rows: a related-field filter with a single choice is not shown at all.
    _build(model)
    _build(model)
    url = _url(model, "changelist")
    changelist = staff_client.get(url).context["cl"]
    tried = 0
    for spec in changelist.filter_specs:
        for choice in spec.choices(changelist):
            if choice["selected"]:  # "All": the unfiltered page already loaded
                continue
            response = staff_client.get(url + choice["query_string"])
            # An unknown lookup redirects to ?e=1 with a 302; only a 200 means the filter applied.
            assert response.status_code == 200, choice["query_string"]
            tried += 1
    if _model_admin(model).list_filter:
        assert tried > 0


@pytest.mark.parametrize(
    "model", [m for m in REGISTERED if _model_admin(m).date_hierarchy], ids=lambda m: m._meta.label
)
def test_changelist_date_hierarchy_loads(staff_client: Client, model: type[Model]) -> None:
    obj = _build(model)
    field = _model_admin(model).date_hierarchy
    when = getattr(obj, field)
    query = {f"{field}__year": when.year, f"{field}__month": when.month, f"{field}__day": when.day}
    response = staff_client.get(_url(model, "changelist"), query)
    assert response.status_code == 200
    assert obj in response.context["cl"].result_list


@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_change_page_loads(staff_client: Client, model: type[Model]) -> None:
    obj = _build(model)
    response = staff_client.get(_url(model, "change", obj.pk))
    assert response.status_code == 200


@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_add_page_loads_or_is_forbidden(
    staff_client: Client, platform_admin: AbstractBaseUser, model: type[Model]
) -> None:
    may_add = _model_admin(model).has_add_permission(_request_as(platform_admin))
    response = staff_client.get(_url(model, "add"))
    assert response.status_code == (200 if may_add else 403)


@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_changelist_queries_do_not_grow_with_rows(staff_client: Client, model: type[Model]) -> None:
    _build(model)
    url = _url(model, "changelist")
    staff_client.get(url)  # warm per-process caches (content types, session) out of the count
    with CaptureQueriesContext(connection) as one_row:
        staff_client.get(url)
    _build(model)
    _build(model)
    with CaptureQueriesContext(connection) as three_rows:
        staff_client.get(url)
    assert len(three_rows) == len(one_row), [q["sql"] for q in three_rows.captured_queries]


@pytest.mark.parametrize("model", EDITABLE, ids=lambda m: m._meta.label)
def test_unchanged_change_form_saves(staff_client: Client, model: type[Model]) -> None:
    """Submitting a change page as rendered works: fields and inlines round-trip, view-only inlines are left alone."""
    obj = _build(model)
    events_before = list(JobEvent.objects.values())
    url = _url(model, "change", obj.pk)
    response = staff_client.post(url, _form_data(staff_client.get(url)))
    assert response.status_code == 302, _form_errors(response)
    assert response.url == _url(model, "changelist")
    assert list(JobEvent.objects.values()) == events_before


# --- every registered model: nobody but staff gets in ----------------------------------------------------------


@pytest.mark.parametrize("persona", ["member", "finance_user", None], ids=["member", "finance", "anonymous"])
@pytest.mark.parametrize("model", REGISTERED, ids=MODEL_IDS)
def test_non_staff_are_sent_to_admin_login(
    client: Client, request: pytest.FixtureRequest, persona: str | None, model: type[Model]
) -> None:
    obj = _build(model)
    if persona is not None:
        client.force_login(request.getfixturevalue(persona))
    login = reverse("admin:login")
    for url in (_url(model, "changelist"), _url(model, "change", obj.pk), _url(model, "add")):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response.url.startswith(login), url
    response = client.post(_url(model, "change", obj.pk), {})
    assert response.status_code == 302
    assert response.url.startswith(login)


# --- view-only audit rows ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(VIEW_ONLY_MODELS, key=lambda m: m._meta.label), ids=lambda m: m._meta.label)
def test_view_only_admin_refuses_writes(staff_client: Client, model: type[Model]) -> None:
    obj = _build(model)
    before = model._default_manager.filter(pk=obj.pk).values().get()
    count = model._default_manager.count()

    change = staff_client.get(_url(model, "change", obj.pk))
    assert change.status_code == 200
    assert not change.context["has_change_permission"]

    assert staff_client.post(_url(model, "change", obj.pk), {"_save": "Save"}).status_code == 403
    assert staff_client.get(_url(model, "add")).status_code == 403
    assert staff_client.post(_url(model, "add"), {"_save": "Save"}).status_code == 403
    assert staff_client.get(_url(model, "delete", obj.pk)).status_code == 403
    assert staff_client.post(_url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
    # Bulk delete is not even offered, and posting it anyway deletes nothing.
    assert "delete_selected" not in _model_admin(model).get_actions(change.wsgi_request)
    staff_client.post(_url(model, "changelist"), {"action": "delete_selected", "_selected_action": [obj.pk]})
    assert model._default_manager.filter(pk=obj.pk).values().get() == before
    assert model._default_manager.count() == count


def test_job_page_shows_events_and_allocations_read_only(staff_client: Client) -> None:
    job = _build_job()
    response = staff_client.get(_url(Job, "change", job.pk))
    inlines = {f.formset.model: f for f in response.context["inline_admin_formsets"]}
    assert set(inlines) == {JobEvent, Allocation}
    for inline in inlines.values():
        assert not inline.has_add_permission
        assert not inline.has_change_permission
        assert not inline.has_delete_permission
        assert len(inline.formset.forms) == 1
    assertContains(response, "by hand")


# --- jobs --------------------------------------------------------------------------------------------------------


def test_job_change_form_keeps_scheduler_fields(staff_client: Client) -> None:
    job = _build_job()
    url = _url(Job, "change", job.pk)
    data = _form_data(staff_client.get(url))
    data.update(priority="high", state="completed", state_reason="forged", submitted_at_0="2001-01-01")
    response = staff_client.post(url, data)
    assert response.status_code == 302, _form_errors(response)
    job.refresh_from_db()
    assert job.priority == "high"
    assert (job.state, job.state_reason) == ("pending", "")
    assert job.submitted_at.year != 2001


def test_job_changelist_shows_request_and_searches_team_and_submitter(staff_client: Client) -> None:
    job = _build_job()
    other = _build_job()
    url = _url(Job, "changelist")
    assertContains(staff_client.get(url), job.request_display)
    for term in (job.name, job.team.slug, job.submitted_by.username):
        results = list(staff_client.get(url, {"q": term}).context["cl"].result_list)
        assert results == [job], term
    assert other not in results


def test_job_changelist_filters_by_state(staff_client: Client) -> None:
    _job()
    now = timezone.now()
    running = _job(state="running", submitted_at=now, started_at=now)
    results = staff_client.get(_url(Job, "changelist"), {"state__exact": "running"}).context["cl"].result_list
    assert list(results) == [running]


# --- form errors are shown, not 500s --------------------------------------------------------------------------


def test_quota_burst_below_guarantee_is_a_form_error(staff_client: Client) -> None:
    quota = QuotaFactory(guaranteed_gpus=Decimal(4), burst_gpus=Decimal(8))
    url = _url(Quota, "change", quota.pk)
    data = _form_data(staff_client.get(url))
    data.update(guaranteed_gpus="10", burst_gpus="5")

    response = staff_client.post(url, data)

    assertContains(response, "Burst must be at least the guaranteed GPUs.")
    quota.refresh_from_db()
    assert (quota.guaranteed_gpus, quota.burst_gpus) == (Decimal(4), Decimal(8))


def test_quota_inline_on_team_page_shows_the_same_error(staff_client: Client) -> None:
    team = _build_team()
    quota = team.quotas.get()
    url = _url(Team, "change", team.pk)
    data = _form_data(staff_client.get(url))
    data.update({"quotas-0-guaranteed_gpus": "10", "quotas-0-burst_gpus": "5"})

    response = staff_client.post(url, data)

    assertContains(response, "Burst must be at least the guaranteed GPUs.")
    quota.refresh_from_db()
    assert (quota.guaranteed_gpus, quota.burst_gpus) == (Decimal(4), Decimal(8))


def test_gpu_invalid_mig_layout_is_a_form_error(staff_client: Client) -> None:
    gpu = GpuFactory(node=NodeFactory(), index=0, mig_layout=[["3g.40gb", 0]])
    assert gpu.node.gpu_model.name == "A100-SXM4-80GB"
    url = _url(Gpu, "change", gpu.pk)
    data = _form_data(staff_client.get(url))
    data["mig_layout"] = '[["3g.40gb", 2]]'

    response = staff_client.post(url, data)

    assertContains(response, "3g.40gb cannot start at memory slice 2; allowed starts: 0, 4")
    assert response.context["adminform"].form.errors["mig_layout"]
    gpu.refresh_from_db()
    assert gpu.mig_layout == [["3g.40gb", 0]]


def test_gpu_inline_on_node_page_validates_layout(staff_client: Client) -> None:
    node = _build_node()
    url = _url(Node, "change", node.pk)
    data = _form_data(staff_client.get(url))
    data["gpus-0-mig_layout"] = '[["3g.40gb", 2]]'

    response = staff_client.post(url, data)

    assertContains(response, "3g.40gb cannot start at memory slice 2; allowed starts: 0, 4")
    assert node.gpus.get(index=0).mig_layout == [["3g.40gb", 0], ["3g.40gb", 4]]


def test_gpus_are_added_only_once_their_node_exists(staff_client: Client) -> None:
    """Gpu.clean() cannot validate against an unsaved node, so the add page offers no GPU rows."""
    assert staff_client.get(_url(Node, "add")).context["inline_admin_formsets"] == []
    node = NodeFactory()
    inlines = staff_client.get(_url(Node, "change", node.pk)).context["inline_admin_formsets"]
    assert [f.formset.model for f in inlines] == [Gpu]


# --- node actions -----------------------------------------------------------------------------------------------


def test_node_actions_cordon_and_mark_ready(staff_client: Client) -> None:
    first, second, bystander = NodeFactory(), NodeFactory(), NodeFactory()
    url = _url(Node, "changelist")

    response = staff_client.post(
        url, {"action": "cordon_nodes", "_selected_action": [first.pk, second.pk]}, follow=True
    )
    assertContains(response, "Cordoned 2 node(s)")
    states = dict(Node.objects.values_list("pk", "state"))
    assert states == {first.pk: "cordoned", second.pk: "cordoned", bystander.pk: "ready"}

    response = staff_client.post(url, {"action": "mark_nodes_ready", "_selected_action": [first.pk]}, follow=True)
    assertContains(response, "Marked 1 node(s) ready")
    states = dict(Node.objects.values_list("pk", "state"))
    assert states == {first.pk: "ready", second.pk: "cordoned", bystander.pk: "ready"}


# --- users and their teams --------------------------------------------------------------------------------------


def test_user_page_adds_a_team_membership(staff_client: Client, member: AbstractBaseUser) -> None:
    other = TeamFactory()
    url = _url(User, "change", member.pk)
    page = staff_client.get(url)
    assertContains(page, "Language Models")  # the member's existing team
    data = _form_data(page)
    prefix = next(f.formset.prefix for f in page.context["inline_admin_formsets"] if f.formset.model is Membership)
    row = int(data[f"{prefix}-TOTAL_FORMS"])
    data.update({f"{prefix}-TOTAL_FORMS": row + 1, f"{prefix}-{row}-team": other.pk, f"{prefix}-{row}-role": "lead"})

    response = staff_client.post(url, data)

    assert response.status_code == 302, _form_errors(response)
    assert set(Membership.objects.filter(user=member).values_list("team__slug", "role")) == {
        ("nlp", "member"),
        (other.slug, "lead"),
    }
