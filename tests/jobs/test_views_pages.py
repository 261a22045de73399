"""The team lead's pages: what each role sees and may do, errors next to their fields, and outsiders who get
404 on every page of another team."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job, JobEvent
from tests.factories import JobFactory, MembershipFactory, QuotaFactory, UserFactory, grant_production
from tests.portal.fleet import fleet, pending_queue, running_job

pytestmark = pytest.mark.django_db

SUBMIT = {
    "name": "chat-7b",
    "kind": "inference",
    "request_by": "model",
    "params_b": "7",
    "dtype": "bf16",
    "context": "4096",
    "batch": "1",
    "mode": "inference",
    "replicas": "1",
    "priority": "normal",
    "tier": "any",
}


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def job(team, node, member):
    return running_job(team, node, name="llama-pretrain", submitted_by=member)


@pytest.fixture
def pending(team, lead):
    return JobFactory(team=team, name="waiting-job", submitted_by=lead, state="pending")


def team_pages(team, job):
    return [
        reverse("jobs:dashboard", args=[team.slug]),
        reverse("jobs:manage", args=[team.slug]),
        reverse("jobs:detail", args=[job.pk]),
    ]


def test_anonymous_users_are_sent_to_sign_in(client, team, job) -> None:
    for url in [*team_pages(team, job), reverse("jobs:submit"), reverse("jobs:queue"), reverse("cluster")]:
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url


def test_outsider_gets_404_on_every_page_of_another_team(client, outsider, team, job, pending) -> None:
    client.force_login(outsider)
    for url in team_pages(team, job):
        assert client.get(url).status_code == 404, url
    for name in ("jobs:cancel", "jobs:priority"):
        assert client.post(reverse(name, args=[pending.pk]), {"priority": "high"}).status_code == 404
    assert client.post(reverse("jobs:manage", args=[team.slug]), {"action": "cancel"}).status_code == 404
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.priority == "normal"
    # Shared pages never show another team's jobs by name.
    for url in (reverse("jobs:queue"), reverse("cluster"), reverse("home")):
        body = client.get(url, follow=True).content.decode()
        assert "waiting-job" not in body and "llama-pretrain" not in body, url


def test_a_lead_of_one_team_lands_on_its_dashboard(client, lead, team, job) -> None:
    QuotaFactory(team=team, gpu_class="A100", guaranteed_gpus=2, burst_gpus=4)
    client.force_login(lead)
    response = client.get("/", follow=True)
    assert response.redirect_chain[-1][0] == reverse("jobs:dashboard", args=[team.slug])
    body = response.content.decode()
    assert "Quota use per GPU class" in body and "llama-pretrain" in body
    assert "Manage priorities" in body
    data = response.context["data"]
    assert data.running_jobs == 1
    a100 = next(q for q in data.quotas if q.gpu_class == "A100")
    assert (a100.guaranteed_gpus, a100.burst_gpus, a100.in_use_gpus, a100.borrowed_gpus) == (2.0, 4.0, 1.0, 0.0)


def test_dashboard_empty_states_say_what_to_do(client, lead, team) -> None:
    client.force_login(lead)
    body = client.get(reverse("jobs:dashboard", args=[team.slug])).content.decode()
    assert "no quota yet" in body and "Submit the team's first job" in body
    assert "Nothing ran for this team" in body


def test_user_without_team_sees_what_to_do(client) -> None:
    client.force_login(UserFactory(username="newcomer"))  # finance without a team lands on billing instead
    assert client.get(reverse("jobs:dashboard_home")).url == reverse("home")
    body = client.get(reverse("home")).content.decode()
    assert "not a member of any team" in body
    assert "nowhere to submit" in client.get(reverse("jobs:submit")).content.decode()


def test_submit_by_model_profile_creates_a_pending_job_with_an_event(client, lead, team, node) -> None:
    client.force_login(lead)
    response = client.post(
        reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "command": "python serve.py --port 8000"}
    )
    job = Job.objects.get(name="chat-7b")
    assert response.url == reverse("jobs:detail", args=[job.pk])
    assert job.model == {"params_b": 7.0, "dtype": "bf16", "context": 4096, "batch": 1, "mode": "inference"}
    assert job.command == ["python", "serve.py", "--port", "8000"]
    assert list(job.events.values_list("type", "actor")) == [("submitted", lead.pk)]
    page = client.get(response.url).content.decode()
    assert "waiting for the next scheduling cycle" in page


def test_submit_errors_are_shown_next_to_their_fields(client, lead, team, node) -> None:
    client.force_login(lead)
    data = {**SUBMIT, "team": team.pk, "params_b": "", "replicas": "0", "command": "python 'unclosed"}
    response = client.post(reverse("jobs:submit"), data)
    assert response.status_code == 200
    form = response.context["form"]
    assert "Required when requesting by this" in form.errors["params_b"][0]
    assert "replicas" in form.errors and "command" in form.errors
    body = response.content.decode()
    assert 'id="id_params_b_error"' in body
    assert not Job.objects.exists()


def test_service_errors_land_on_the_field(client, lead, team, node) -> None:
    client.force_login(lead)
    response = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "project": "no-such-project"})
    assert "has no project 'no-such-project'" in response.context["form"].errors["project"][0]


def test_member_priority_is_limited_by_role(client, member, team, node) -> None:
    client.force_login(member)
    page = client.get(reverse("jobs:submit"))
    assert [c[0] for c in page.context["form"].fields["priority"].choices] == ["normal", "low"]
    response = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "priority": "production"})
    assert "priority" in response.context["form"].errors
    assert not Job.objects.exists()


def test_live_suggestion_shows_the_profile_and_the_estimate(client, member, node) -> None:
    client.force_login(member)
    response = client.post(reverse("jobs:suggest"), {**SUBMIT, "params_b": "13", "context": "8192"})
    body = response.content.decode()
    assert "MIG 3g.40gb on A100-SXM4-80GB" in body
    assert "weights 24.2 GiB" in body and "10 % margin" in body
    too_big = client.post(reverse("jobs:suggest"), {**SUBMIT, "params_b": "2000"}).content.decode()
    assert 'data-testid="unplaceable"' in too_big and "largest GPU in the cluster" in too_big
    missing = client.post(reverse("jobs:suggest"), {**SUBMIT, "request_by": "gpus"}).content.decode()
    assert "Required when requesting by this" in missing


def test_queue_shows_positions_eta_and_why(client, lead, team) -> None:
    pending_queue(team, 3, submitted_by=lead)
    JobFactory(team=team, name="fresh", state="pending", submitted_by=lead)  # no cycle has seen it yet
    client.force_login(lead)
    response = client.get(reverse("jobs:queue"))
    body = response.content.decode()
    assert [j.name for j in response.context["page"]] == ["queued-00000", "queued-00001", "queued-00002", "fresh"]
    assert "#1" in body and "3 jobs of higher priority are ahead" in body
    assert "waiting for the next scheduling cycle" in body
    assert "every 10s" in body  # refreshes in place
    partial = client.get(reverse("jobs:queue"), {"name": "fresh"}, headers={"HX-Request": "true"})
    assert partial.templates[0].name == "jobs/partials/queue_table.html"
    assert "fresh" in partial.content.decode() and "queued-00000" not in partial.content.decode()


def test_queue_filters(client, lead, member, team) -> None:
    pending_queue(team, 2, submitted_by=lead)
    JobFactory(team=team, name="mine", state="pending", submitted_by=member, priority="low")
    client.force_login(member)
    names = lambda params: [j.name for j in client.get(reverse("jobs:queue"), params).context["page"]]  # noqa: E731
    assert names({"mine": "true"}) == ["mine"]
    assert names({"priority": "low"}) == ["mine"]
    assert names({"team": team.slug}) == ["queued-00000", "queued-00001", "mine"]
    assert names({"priority": "bogus"}) == []


def test_job_detail_shows_timeline_placement_and_cost(client, member, job) -> None:
    client.force_login(member)
    response = client.get(reverse("jobs:detail", args=[job.pk]))
    body = response.content.decode()
    assert "a100-res-01" in body and "whole GPU" in body
    usage = response.context["usage"]
    assert usage.gpu_hours == pytest.approx(2.0, abs=0.01)
    assert float(usage.cost) == pytest.approx(4.2, abs=0.05)
    assert "Submitted" in body and "Bound" in body


def test_member_cancels_own_job_but_not_a_colleagues(client, member, lead, team, job, pending) -> None:
    client.force_login(member)
    assert client.post(reverse("jobs:cancel", args=[pending.pk])).status_code == 403
    assert client.post(reverse("jobs:priority", args=[job.pk]), {"priority": "high"}).status_code == 403
    response = client.post(reverse("jobs:cancel", args=[job.pk]), {"reason": "done testing"})
    assert response.status_code == 302
    job.refresh_from_db()
    pending.refresh_from_db()
    assert job.state == "cancelled" and pending.state == "pending"
    assert JobEvent.objects.get(job=job, type="cancelled").actor == member
    assert job.allocations.filter(ended_at__isnull=True).count() == 0


def test_lead_changes_priority_and_the_timeline_shows_who(client, lead, pending) -> None:
    client.force_login(lead)
    client.post(reverse("jobs:priority", args=[pending.pk]), {"priority": "high"})
    pending.refresh_from_db()
    assert pending.priority == "high"
    event = JobEvent.objects.get(job=pending, type="priority_changed")
    assert (event.actor, event.details) == (lead, {"old": "normal", "new": "high"})
    body = client.get(reverse("jobs:detail", args=[pending.pk])).content.decode()
    assert "Priority changed" in body and "normal → high" in body and "by nlp-lead" in body


def test_cancelling_an_ended_job_says_why(client, lead, pending) -> None:
    client.force_login(lead)
    client.post(reverse("jobs:cancel", args=[pending.pk]))
    response = client.post(reverse("jobs:cancel", args=[pending.pk]), follow=True)
    assert "already cancelled" in response.content.decode()


def test_member_cannot_manage_the_queue(client, member, team) -> None:
    client.force_login(member)
    response = client.get(reverse("jobs:manage", args=[team.slug]))
    assert response.status_code == 403 and "Only a lead can do that" in response.content.decode()
    assert client.post(reverse("jobs:manage", args=[team.slug]), {"action": "cancel"}).status_code == 403


def test_lead_reorders_reprioritises_and_bulk_cancels(client, lead, team) -> None:
    a, b, c = (JobFactory(team=team, name=n, state="pending", submitted_by=lead) for n in ("a", "b", "c"))
    url = reverse("jobs:manage", args=[team.slug])
    client.force_login(lead)
    assert [j.name for j in client.get(url).context["jobs"]] == ["a", "b", "c"]

    client.post(url, {"action": f"up:{c.pk}"})
    assert [j.name for j in client.get(url).context["jobs"]] == ["a", "c", "b"]
    assert set(JobEvent.objects.filter(type="rank_changed").values_list("actor", flat=True)) == {lead.pk}

    client.post(url, {"action": "priority", "priority": "high", "selected": [b.pk]})
    assert [j.name for j in client.get(url).context["jobs"]] == ["b", "a", "c"]

    response = client.post(url, {"action": "cancel", "selected": [a.pk, c.pk]}, follow=True)
    assert "Cancelled 2 jobs." in response.content.decode()
    assert list(Job.objects.filter(state="pending").values_list("name", flat=True)) == ["b"]
    assert JobEvent.objects.filter(type="cancelled", actor=lead).count() == 2


def test_bulk_actions_refuse_jobs_of_other_teams(client, lead, team, outsider) -> None:
    theirs = JobFactory(team=outsider.memberships.get().team, name="theirs", state="pending")
    client.force_login(lead)
    response = client.post(
        reverse("jobs:manage", args=[team.slug]), {"action": "cancel", "selected": [theirs.pk]}, follow=True
    )
    assert "not jobs of this team" in response.content.decode()
    theirs.refresh_from_db()
    assert theirs.state == "pending"


def test_platform_admin_sees_and_manages_every_team(client, platform_admin, team, job, pending) -> None:
    client.force_login(platform_admin)
    for url in team_pages(team, job):
        assert client.get(url).status_code == 200, url
    client.post(reverse("jobs:priority", args=[pending.pk]), {"priority": "production"})
    pending.refresh_from_db()
    assert pending.priority == "normal"  # a platform admin, too, is bound by the team's grant: grant first
    grant_production(team, "training")
    client.post(reverse("jobs:priority", args=[pending.pk]), {"priority": "production"})
    pending.refresh_from_db()
    assert pending.priority == "production"


def test_times_are_shown_in_the_browsers_zone(client, lead, team, pending) -> None:
    from datetime import UTC, datetime

    Job.objects.filter(pk=pending.pk).update(submitted_at=datetime(2026, 1, 5, 23, 30, tzinfo=UTC))
    client.force_login(lead)
    client.cookies["tz"] = "Asia%2FTokyo"
    body = client.get(reverse("jobs:detail", args=[pending.pk])).content.decode()
    assert "6 Jan 08:30" in body and "Times shown in Asia/Tokyo" in body
    client.cookies["tz"] = "Not/AZone"
    body = client.get(reverse("jobs:detail", args=[pending.pk])).content.decode()
    assert "5 Jan 23:30" in body and "Times shown in UTC" in body


def test_lead_of_two_teams_sees_both_in_the_overview(client, lead, team) -> None:
    other = MembershipFactory(user=lead, role="member").team
    client.force_login(lead)
    response = client.get(reverse("home"))
    assert response.status_code == 200 and other.name in response.content.decode()
    UserFactory(username="unused")  # not a member of anything: the overview lists memberships only
