"""Job changes from the admin go through the jobs services: priority, rank, cancel and requeue each leave a job
event with the admin as actor; what a running or ended job asked for is read-only; staff who are not platform
admins are refused by the services, and the admin says so."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import AbstractBaseUser, Permission
from django.test import Client
from django.utils import timezone
from pytest_django.asserts import assertContains

from jobs.admin import REQUEST_FIELDS, SERVICE_FIELDS
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from scheduler.loop.cycle import cycle_run
from scheduler.loop.reconcile import reconcile
from tests.factories import AllocationFactory, JobFactory, ProjectFactory, UserFactory
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed
from tests.test_admin import _form_data, _form_errors, _url

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client, platform_admin: AbstractBaseUser) -> Client:
    client.force_login(platform_admin)
    return client


def _job(state: str = "pending") -> Job:
    project = ProjectFactory()
    now = timezone.now()
    started = now if state != "pending" else None
    finished = now if state not in ("pending", "running") else None
    job = JobFactory(
        team=project.team, project=project, state=state, submitted_at=now, started_at=started, finished_at=finished
    )
    if state == "running":
        AllocationFactory(job=job)
    return job


def _post_change(client: Client, job: Job, **changes: object) -> None:
    url = _url(Job, "change", job.pk)
    data = _form_data(client.get(url))
    data.update(changes)
    response = client.post(url, data)
    assert response.status_code == 302, _form_errors(response)


@pytest.mark.parametrize("state", ["pending", "running"])
def test_priority_and_rank_changes_are_job_events_by_the_admin(
    staff_client: Client, platform_admin: AbstractBaseUser, state: str
) -> None:
    job = _job(state)
    old_priority, old_rank = job.priority, job.rank
    new_priority = "high" if old_priority != "high" else "low"

    _post_change(staff_client, job, priority=new_priority, rank=old_rank + 3)

    job.refresh_from_db()
    assert (job.priority, job.rank) == (new_priority, old_rank + 3)
    events = {e.type: e for e in job.events.filter(type__in=["priority_changed", "rank_changed"])}
    assert set(events) == {"priority_changed", "rank_changed"}
    assert events["priority_changed"].actor_id == platform_admin.pk
    assert events["priority_changed"].details == {"old": old_priority, "new": new_priority}
    assert events["rank_changed"].actor_id == platform_admin.pk
    assert events["rank_changed"].details == {"old": old_rank, "new": old_rank + 3}
    assert job.state == state


def test_a_running_jobs_request_is_read_only(staff_client: Client) -> None:
    job = _job("running")
    before = Job.objects.filter(pk=job.pk).values(*REQUEST_FIELDS).get()
    page = staff_client.get(_url(Job, "change", job.pk))
    form_fields = set(page.context["adminform"].form.fields)
    assert not form_fields & set(REQUEST_FIELDS)
    assert set(SERVICE_FIELDS) <= form_fields

    data = _form_data(page)
    data.update(gpus=7, kind="inference", team=ProjectFactory().team.pk, image="evil:latest", command="rm -rf /")
    response = staff_client.post(_url(Job, "change", job.pk), data)

    assert response.status_code == 302, _form_errors(response)
    assert Job.objects.filter(pk=job.pk).values(*REQUEST_FIELDS).get() == before


def test_an_ended_jobs_request_priority_and_rank_are_read_only(staff_client: Client) -> None:
    job = _job("completed")
    form_fields = set(staff_client.get(_url(Job, "change", job.pk)).context["adminform"].form.fields)
    assert not form_fields & {*REQUEST_FIELDS, *SERVICE_FIELDS}


def test_a_pending_jobs_request_stays_editable(staff_client: Client) -> None:
    job = _job("pending")
    form_fields = set(staff_client.get(_url(Job, "change", job.pk)).context["adminform"].form.fields)
    assert set(REQUEST_FIELDS) <= form_fields


def test_staff_without_the_platform_admin_role_are_refused_by_the_service(client: Client) -> None:
    staff = UserFactory(username="helpdesk", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "change_job"]))
    client.force_login(staff)
    job = _job("pending")
    url = _url(Job, "change", job.pk)
    data = _form_data(client.get(url))
    data.update(priority="production")

    response = client.post(url, data, follow=True)

    assertContains(response, "only")
    job.refresh_from_db()
    assert job.priority != "production"
    assert not job.events.filter(type="priority_changed").exists()


def test_cancel_action_cancels_through_the_service(staff_client: Client, platform_admin: AbstractBaseUser) -> None:
    pending, running, bystander = _job("pending"), _job("running"), _job("pending")

    response = staff_client.post(
        _url(Job, "changelist"), {"action": "cancel_jobs", "_selected_action": [pending.pk, running.pk]}, follow=True
    )

    assertContains(response, "Cancelled 2 job(s)")
    states = dict(Job.objects.values_list("pk", "state"))
    assert states == {pending.pk: "cancelled", running.pk: "cancelled", bystander.pk: "pending"}
    for job in (pending, running):
        event = job.events.get(type="cancelled")
        assert event.actor_id == platform_admin.pk
    assert not running.allocations.filter(ended_at__isnull=True).exists()


def test_cancel_action_with_an_ended_job_cancels_nothing(staff_client: Client) -> None:
    pending, done = _job("pending"), _job("completed")

    response = staff_client.post(
        _url(Job, "changelist"), {"action": "cancel_jobs", "_selected_action": [pending.pk, done.pk]}, follow=True
    )

    assertContains(response, f"job {done.pk} is already completed")
    assert Job.objects.get(pk=pending.pk).state == "pending"
    assert not JobEvent.objects.filter(type="cancelled").exists()


def test_requeue_action_refuses_jobs_that_are_not_running(staff_client: Client) -> None:
    running, pending = _job("running"), _job("pending")

    response = staff_client.post(
        _url(Job, "changelist"), {"action": "requeue_jobs", "_selected_action": [running.pk, pending.pk]}, follow=True
    )

    assertContains(response, f"job {pending.pk} is pending; only running jobs can be requeued")
    assert Job.objects.get(pk=running.pk).state == "running"
    assert not JobEvent.objects.filter(type="requeued").exists()


def test_requeue_action_stops_a_running_job_and_the_next_cycle_evicts_its_pods(
    client: Client, platform_admin: AbstractBaseUser
) -> None:
    clock = Clock()
    fleet_seed()
    team = team_seed()
    spec = {"kind": "training", "gpus": 1, "gpu_model": "A100-PCIE-40GB", "duration_s": 100_000}
    job = job_submit(team=team, spec=spec, actor=None, now=clock.now)
    gateway = fleet(clock)
    cycle_run(gateway=gateway)
    job.refresh_from_db()
    assert job.state == "running"
    client.force_login(platform_admin)

    response = client.post(
        _url(Job, "changelist"), {"action": "requeue_jobs", "_selected_action": [job.pk]}, follow=True
    )

    assertContains(response, "Requeued 1 job(s)")
    job.refresh_from_db()
    assert job.state == "pending"
    assert f"requeued by {platform_admin} (admin)" in job.state_reason
    events = {e.type: e for e in job.events.filter(type__in=["preempted", "requeued"])}
    assert set(events) == {"preempted", "requeued"}
    assert all(e.actor_id == platform_admin.pk for e in events.values())
    assert events["preempted"].details["reason"] == "admin"
    assert not job.allocations.filter(ended_at__isnull=True).exists()
    # The pods still run on the cluster; the next reconcile evicts the pods of a pending job.
    view = gateway.observe()
    assert str(job.pk) in view.jobs
    ops = reconcile(view, at=datetime.fromtimestamp(view.observed_at, tz=UTC)).ops
    assert [(op.job, op.reason) for op in ops] == [(str(job.pk), "requeued")]
