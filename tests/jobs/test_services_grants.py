"""Production is granted by a platform admin, not self-served (teams.grants): the team's highest priority and
the job kinds production is for bind every actor, in the services (job_submit, job_set_priority and its bulk
form) whatever edge calls them; the API answers 403 and the pages a form error, each saying who grants it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.errors import JobPermissionDenied, PriorityNotGranted
from jobs.models import Job, JobEvent
from jobs.services import job_set_priority, job_set_priority_bulk, job_submit
from teams.grants import priorities_granted
from teams.roles import PLATFORM_ADMIN
from tests.factories import JobFactory, UserFactory, grant_production
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet
from tests.test_admin import _form_data, _url

pytestmark = pytest.mark.django_db

SERVING = {"name": "chat", "kind": "inference", "gpus": 1, "priority": "production"}
TRAINING = {"name": "pretrain", "kind": "training", "gpus": 1, "priority": "production"}
WHO_GRANTS = "production is granted by a platform admin: ask one to allow it for team nlp"
ORG_FILE = "or set `max_priority: production` for team nlp in the organisation file (teams apply)"


@pytest.fixture
def group_admin(db):
    """A platform admin by group alone (not a superuser)."""
    user = UserFactory(username="erin")
    user.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN)[0])
    return user


def persona(request, name: str):
    return None if name == "system" else request.getfixturevalue(name)


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- the grant itself ---------------------------------------------------------------------------------------


def test_a_new_team_may_use_high_at_most_and_production_only_once_granted_for_inference(team):
    assert (team.max_priority, team.production_kinds) == ("high", ["inference"])
    assert priorities_granted(team) == ("high", "normal", "low")
    grant_production(team)
    assert priorities_granted(team, "inference") == ("production", "high", "normal", "low")
    assert priorities_granted(team, "training") == priorities_granted(team, "batch") == ("high", "normal", "low")
    assert priorities_granted(team) == ("production", "high", "normal", "low")  # for some kind


# --- job_submit, by role ------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["system", "platform_admin", "group_admin", "lead", "member"])
def test_nobody_submits_production_for_a_team_not_granted_it(request, team, lead, who):
    """The grant comes before the role: asking the lead would not help, so even a member is told who grants."""
    with pytest.raises(PriorityNotGranted) as caught:
        job_submit(team=team, spec=SERVING, actor=persona(request, who))
    assert caught.value.field == "priority"
    assert str(caught.value) == (
        "team nlp is not granted production priority (its highest is high): "
        f"{WHO_GRANTS} (Admin → Teams → Language Models → Highest priority) {ORG_FILE}; "
        "meanwhile submit at high, normal or low"
    )
    assert not Job.objects.exists() and not JobEvent.objects.exists()


@pytest.mark.parametrize("who", ["finance_user", "outsider"])
def test_people_without_a_role_learn_nothing_of_the_grant(request, team, lead, who):
    with pytest.raises(JobPermissionDenied) as caught:
        job_submit(team=team, spec=SERVING, actor=persona(request, who))
    assert not isinstance(caught.value, PriorityNotGranted) and "granted" not in str(caught.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("who", "allowed"), [("system", True), ("group_admin", True), ("lead", True), ("member", False)]
)
def test_a_granted_team_submits_production_inference_within_the_roles(request, team, lead, who, allowed):
    grant_production(team)
    actor = persona(request, who)
    if allowed:
        assert job_submit(team=team, spec=SERVING, actor=actor).priority == "production"
        return
    with pytest.raises(JobPermissionDenied, match="production needs team nlp's lead") as caught:
        job_submit(team=team, spec=SERVING, actor=actor)
    assert not isinstance(caught.value, PriorityNotGranted)


def test_production_training_is_refused_unless_the_admin_allows_training(team, lead):
    grant_production(team)
    with pytest.raises(PriorityNotGranted) as caught:
        job_submit(team=team, spec=TRAINING, actor=lead)
    assert str(caught.value) == (
        "team nlp may use production priority for inference jobs only, not for a training job: production for "
        "training jobs is granted by a platform admin: ask one to allow it for team nlp (Admin → Teams → "
        "Language Models → Production for) or add training to `production_kinds` of team nlp in the "
        "organisation file (teams apply); meanwhile submit at high, normal or low"
    )
    assert not Job.objects.exists()
    grant_production(team, "inference", "training")
    assert job_submit(team=team, spec=TRAINING, actor=lead).priority == "production"


def test_a_lower_ceiling_refuses_high_too(team, lead):
    team.max_priority = "normal"
    team.save()
    with pytest.raises(PriorityNotGranted, match=r"team nlp is not granted high priority \(its highest is normal\)"):
        job_submit(team=team, spec={"gpus": 1, "priority": "high"}, actor=lead)
    assert job_submit(team=team, spec={"gpus": 1, "priority": "normal"}, actor=lead).priority == "normal"


# --- job_set_priority and its bulk form ---------------------------------------------------------------------


@pytest.mark.parametrize("who", ["system", "platform_admin", "lead"])
def test_nobody_raises_a_job_to_a_priority_the_team_is_not_granted(request, team, who):
    job = JobFactory(team=team, kind="inference", state="pending")
    with pytest.raises(PriorityNotGranted, match=WHO_GRANTS):
        job_set_priority(job=job, priority="production", actor=persona(request, who))
    job.refresh_from_db()
    assert job.priority == "normal" and not JobEvent.objects.exists()
    grant_production(team)
    assert job_set_priority(job=job, priority="production", actor=persona(request, who)).priority == "production"


def test_a_revoked_grant_stops_no_running_work_and_lowering_stays_allowed(team, lead):
    now = timezone.now()
    job = JobFactory(
        team=team, kind="inference", state="running", submitted_at=now, started_at=now, priority="production"
    )
    assert job_set_priority(job=job, priority="high", actor=lead).priority == "high"  # high is granted
    with pytest.raises(PriorityNotGranted):
        job_set_priority(job=job, priority="production", actor=lead)


def test_a_bulk_priority_change_is_refused_whole_when_one_job_is_not_granted(team, lead):
    grant_production(team)
    serving = JobFactory(team=team, kind="inference", state="pending", name="serving")
    training = JobFactory(team=team, kind="training", state="pending", name="training")
    with pytest.raises(PriorityNotGranted, match=f"job {training.pk} .training, training.: team nlp may use"):
        job_set_priority_bulk(jobs=[serving, training], priority="production", actor=lead)
    assert set(Job.objects.values_list("priority", flat=True)) == {"normal"} and not JobEvent.objects.exists()
    changed = job_set_priority_bulk(jobs=[serving, training], priority="high", actor=lead)
    assert [j.priority for j in changed] == ["high", "high"]
    assert JobEvent.objects.filter(type="priority_changed").count() == 2


# --- the edges: API, pages, admin -------------------------------------------------------------------------


def test_the_api_answers_403_saying_who_grants_production(team, lead, outsider):
    fleet()
    response = api(lead).post("/api/v1/jobs/", {"team": "nlp", **SERVING}, format="json")
    assert response.status_code == 403 and response["Content-Type"] == "application/json"
    assert WHO_GRANTS in response.json()["detail"] and ORG_FILE in response.json()["detail"]
    job = JobFactory(team=team, kind="inference", state="pending")
    response = api(lead).post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "production"}, format="json")
    assert response.status_code == 403 and WHO_GRANTS in response.json()["detail"]
    # An outsider still learns nothing: 404, as for every other team's job or team.
    assert api(outsider).post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "production"}).status_code == 404
    assert api(outsider).post("/api/v1/jobs/", {"team": "nlp", **SERVING}, format="json").status_code == 404
    grant_production(team)
    response = api(lead).post("/api/v1/jobs/", {"team": "nlp", **SERVING}, format="json")
    assert response.status_code == 201 and response.json()["priority"] == "production"


def test_the_submit_form_marks_production_not_granted_and_says_who_grants_it(client, team, lead):
    fleet()
    client.force_login(lead)
    field = client.get(reverse("jobs:submit")).context["form"].fields["priority"]
    assert field.choices[0] == ("production", "production (not granted: a platform admin grants it)")
    assert "none of your teams has it" in field.help_text
    response = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "priority": "production"})
    errors = response.context["form"].errors
    assert list(errors) == ["priority"] and WHO_GRANTS in errors["priority"][0]
    assert not Job.objects.exists()
    grant_production(team)
    field = client.get(reverse("jobs:submit")).context["form"].fields["priority"]
    assert field.choices[0] == ("production", "production") and "nlp for inference jobs" in field.help_text
    response = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "priority": "production"})
    assert response.status_code == 302 and Job.objects.get().priority == "production"


def test_the_submit_form_refuses_production_training_with_the_grant_s_words(client, team, lead):
    fleet()
    grant_production(team)
    client.force_login(lead)
    data = {**SUBMIT, "team": team.pk, "priority": "production", "kind": "training", "mode": "training"}
    response = client.post(reverse("jobs:submit"), data)
    assert (
        "production for training jobs is granted by a platform admin" in response.context["form"].errors["priority"][0]
    )
    assert not Job.objects.exists()


def test_the_job_page_and_the_manage_page_offer_only_granted_priorities(client, team, lead):
    job = JobFactory(team=team, kind="inference", state="pending")
    client.force_login(lead)
    offered = client.get(reverse("jobs:detail", args=[job.pk])).context["priority_form"].fields["priority"].choices
    assert [value for value, _label in offered] == ["high", "normal", "low"]
    assert client.get(reverse("jobs:manage", args=[team.slug])).context["priorities"] == ("high", "normal", "low")
    grant_production(team)
    offered = client.get(reverse("jobs:detail", args=[job.pk])).context["priority_form"].fields["priority"].choices
    assert offered[0][0] == "production"


def test_the_pages_show_the_refusal_and_change_nothing(client, team, lead):
    job = JobFactory(team=team, kind="inference", state="pending")
    client.force_login(lead)
    response = client.post(reverse("jobs:priority", args=[job.pk]), {"priority": "production"}, follow=True)
    assert "production is granted by a platform admin" in response.content.decode()
    grant_production(team)
    training = JobFactory(team=team, kind="training", state="pending")
    response = client.post(
        reverse("jobs:manage", args=[team.slug]),
        {"action": "priority", "priority": "production", "selected": [str(job.pk), str(training.pk)]},
        follow=True,
    )
    assert "production for training jobs is granted by a platform admin" in response.content.decode()
    assert set(Job.objects.values_list("priority", flat=True)) == {"normal"} and not JobEvent.objects.exists()


def test_a_platform_admin_in_the_admin_grants_first(client, team, platform_admin):
    job = JobFactory(team=team, kind="inference", state="pending")
    client.force_login(platform_admin)
    url = _url(Job, "change", job.pk)
    response = client.post(url, {**_form_data(client.get(url)), "priority": "production"}, follow=True)
    assert WHO_GRANTS in response.content.decode()
    job.refresh_from_db()
    assert job.priority == "normal" and not JobEvent.objects.exists()
    team_url = _url(type(team), "change", team.pk)
    client.post(team_url, {**_form_data(client.get(team_url)), "max_priority": "production"})
    team.refresh_from_db()
    assert team.max_priority == "production"
    client.post(url, {**_form_data(client.get(url)), "priority": "production"})
    job.refresh_from_db()
    assert job.priority == "production"


def test_the_admin_cannot_turn_a_production_inference_job_into_ungranted_production_training(
    client, team, platform_admin
):
    grant_production(team)  # inference only
    job = JobFactory(team=team, kind="inference", priority="production", state="pending")
    client.force_login(platform_admin)
    url = _url(Job, "change", job.pk)
    response = client.post(url, {**_form_data(client.get(url)), "kind": "training"})
    assert response.status_code == 200  # the form again, with the reason at the kind
    assert "production for training jobs is granted by a platform admin" in str(
        response.context["adminform"].form.errors["kind"]
    )
    job.refresh_from_db()
    assert (job.kind, job.priority) == ("inference", "production")
    grant_production(team, "inference", "training")
    client.post(url, {**_form_data(client.get(url)), "kind": "training"})
    job.refresh_from_db()
    assert job.kind == "training"
