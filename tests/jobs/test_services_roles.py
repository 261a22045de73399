"""The role rules, enforced by every jobs service whatever edge calls it: a member submits at normal or low and
cancels only what they submitted; a lead manages every job of the team; a platform admin everything; finance,
outsiders and deactivated accounts nothing; the system (actor None) everything. A refusal writes nothing and
its message says whom to ask."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from jobs import access
from jobs.errors import JobPermissionDenied, JobSpecInvalid
from jobs.models import Job, JobEvent
from jobs.services import job_cancel, job_cancel_bulk, job_list_reorder, job_set_priority, job_set_rank, job_submit
from teams.roles import PLATFORM_ADMIN
from tests.factories import JobFactory, MembershipFactory, UserFactory, grant_production

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _granted(team):
    """The roles are the subject here, so the team is granted every priority for every job kind; the grant's
    own rules, and the roles under a grant, are tests/jobs/test_services_grants.py's."""
    grant_production(team, "training", "inference", "batch")


PRIORITIES = ("production", "high", "normal", "low")


@pytest.fixture
def colleague(team):
    """A second member of the team: not the submitter of the member's jobs."""
    return MembershipFactory(team=team, role="member", user=UserFactory(username="nlp-colleague")).user


@pytest.fixture
def group_admin(db):
    """A platform admin by group alone (not a superuser)."""
    user = UserFactory(username="erin")
    user.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN)[0])
    return user


@pytest.fixture
def retired_member(team):
    """A member of the team whose account was deactivated."""
    user = UserFactory(username="nlp-retired", is_active=False)
    MembershipFactory(team=team, role="member", user=user)
    return user


def persona(request, name: str):
    """The actor called ``name``: ``system`` is None, every other name a fixture."""
    return None if name == "system" else request.getfixturevalue(name)


MANAGERS = ("system", "platform_admin", "group_admin", "lead")
NO_ACCESS = ("finance_user", "outsider", "retired_member")


def assert_nothing_written() -> None:
    assert not Job.objects.exists() and not JobEvent.objects.exists()


# --- job_submit ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", [*MANAGERS, "member"])
@pytest.mark.parametrize("priority", PRIORITIES)
def test_submit_priority_by_role(request, team, lead, who, priority):
    actor = persona(request, who)
    allowed = who != "member" or priority in ("normal", "low")
    if allowed:
        job = job_submit(team=team, spec={"gpus": 1, "priority": priority}, actor=actor)
        assert job.priority == priority and job.submitted_by == actor
        assert JobEvent.objects.get(job=job).actor == actor
    else:
        with pytest.raises(JobPermissionDenied) as caught:
            job_submit(team=team, spec={"gpus": 1, "priority": priority}, actor=actor)
        assert caught.value.field == "priority"
        assert str(caught.value) == (
            f"nlp-member is a member of team nlp and may use normal or low priority; {priority} needs team nlp's "
            "lead (nlp-lead) or a platform admin: submit at normal and ask them to raise it"
        )
        assert_nothing_written()


def test_a_member_submits_at_normal_when_no_priority_is_given(team, member):
    assert job_submit(team=team, spec={"gpus": 1}, actor=member).priority == "normal"


@pytest.mark.parametrize(("who", "allowed"), [("member", False), ("lead", True), ("group_admin", True)])
def test_only_managers_submit_with_a_rank(request, team, who, allowed):
    actor = persona(request, who)
    if allowed:
        assert job_submit(team=team, spec={"gpus": 1, "rank": -3}, actor=actor).rank == -3
        return
    with pytest.raises(JobPermissionDenied, match=r"only team nlp's lead .* orders the team's jobs") as caught:
        job_submit(team=team, spec={"gpus": 1, "rank": -3}, actor=actor)
    assert caught.value.field == "rank"
    assert job_submit(team=team, spec={"gpus": 1, "rank": 0}, actor=actor).rank == 0  # the default is no claim


@pytest.mark.parametrize(
    ("who", "message"),
    [
        ("finance_user", "carol works in finance, which reads cost reports and changes no jobs; for team nlp's jobs"),
        ("outsider", "vision-lead is not a member of team nlp: ask team nlp's lead (nlp-lead) or a platform admin"),
        ("retired_member", "nlp-retired's account is deactivated: a platform admin can reactivate it"),
    ],
)
def test_no_role_no_submit_even_with_a_bad_spec(request, team, lead, who, message):
    actor = persona(request, who)
    for spec in ({"gpus": 1, "priority": "low"}, {"gpus": 0, "colour": "red"}):
        with pytest.raises(JobPermissionDenied) as caught:
            job_submit(team=team, spec=spec, actor=actor)
        assert message in str(caught.value) and caught.value.field is None
    assert_nothing_written()


def test_a_bad_priority_is_a_spec_error_for_a_member_too(team, member):
    with pytest.raises(JobSpecInvalid, match="priority: must be one of production, high, normal, low"):
        job_submit(team=team, spec={"gpus": 1, "priority": "urgent"}, actor=member)


def test_a_team_without_a_lead_sends_people_to_a_platform_admin(team, member):
    with pytest.raises(JobPermissionDenied, match="high needs team nlp's lead or a platform admin"):
        job_submit(team=team, spec={"gpus": 1, "priority": "high"}, actor=member)


# --- job_cancel ---------------------------------------------------------------------------------------------


@pytest.fixture
def members_job(team, member):
    """A pending job the member submitted through the service (so ``submitted_by`` and the event agree)."""
    return job_submit(team=team, spec={"gpus": 1}, actor=member)


@pytest.mark.parametrize("who", [*MANAGERS, "member"])
def test_the_submitter_and_the_managers_cancel(request, members_job, member, who):
    assert JobEvent.objects.get(job=members_job, type="submitted").actor == member == members_job.submitted_by
    actor = persona(request, who)
    cancelled = job_cancel(job=members_job, actor=actor, reason="not needed")
    assert cancelled.state == "cancelled"
    event = JobEvent.objects.get(job=members_job, type="cancelled")
    assert (event.actor, event.details) == (actor, {"reason": "not needed"})


def test_another_member_cannot_cancel_and_is_told_whom_to_ask(members_job, colleague, lead):
    with pytest.raises(JobPermissionDenied) as caught:
        job_cancel(job=members_job, actor=colleague)
    assert str(caught.value) == (
        f"job {members_job.pk} ({members_job.name}) was submitted by nlp-member; a member cancels only the jobs "
        "they submitted: ask team nlp's lead (nlp-lead) or a platform admin to cancel it"
    )
    members_job.refresh_from_db()
    assert members_job.state == "pending" and not JobEvent.objects.filter(type="cancelled").exists()


def test_a_member_cannot_cancel_what_the_system_submitted(team, member):
    job = job_submit(team=team, spec={"gpus": 1}, actor=None)
    with pytest.raises(JobPermissionDenied, match="was submitted by the system"):
        job_cancel(job=job, actor=member)


def test_a_submitter_who_left_the_team_cannot_cancel(members_job, member):
    member.memberships.all().delete()
    with pytest.raises(JobPermissionDenied, match="nlp-member is not a member of team nlp"):
        job_cancel(job=members_job, actor=member)


@pytest.mark.parametrize("who", NO_ACCESS)
def test_no_role_no_cancel(request, members_job, who):
    with pytest.raises(JobPermissionDenied):
        job_cancel(job=members_job, actor=persona(request, who))
    members_job.refresh_from_db()
    assert members_job.state == "pending" and not JobEvent.objects.filter(type="cancelled").exists()


# --- job_set_priority and job_set_rank ----------------------------------------------------------------------


@pytest.mark.parametrize("who", MANAGERS)
@pytest.mark.parametrize("priority", ["production", "low"])
def test_managers_set_any_priority_with_an_event(request, team, who, priority):
    job = JobFactory(team=team, state="pending")
    actor = persona(request, who)
    assert job_set_priority(job=job, priority=priority, actor=actor).priority == priority
    event = JobEvent.objects.get(job=job)
    assert (event.type, event.actor, event.details) == ("priority_changed", actor, {"old": "normal", "new": priority})


@pytest.mark.parametrize("who", MANAGERS)
def test_managers_set_a_rank_with_an_event(request, team, who):
    job = JobFactory(team=team, state="pending")
    actor = persona(request, who)
    assert job_set_rank(job=job, rank=-2, actor=actor).rank == -2
    event = JobEvent.objects.get(job=job)
    assert (event.type, event.actor, event.details) == ("rank_changed", actor, {"old": 0, "new": -2})


@pytest.mark.parametrize("priority", ["low", "high"])
def test_a_member_changes_no_priority_even_of_their_own_job(members_job, member, lead, priority):
    with pytest.raises(JobPermissionDenied) as caught:
        job_set_priority(job=members_job, priority=priority, actor=member)
    assert str(caught.value) == (
        "only team nlp's lead (nlp-lead) or a platform admin can change a job's priority; nlp-member is a member: "
        "ask them to do it"
    )
    members_job.refresh_from_db()
    assert members_job.priority == "normal" and not JobEvent.objects.exclude(type="submitted").exists()


def test_a_member_changes_no_rank(members_job, member):
    with pytest.raises(JobPermissionDenied, match="can change a job's rank"):
        job_set_rank(job=members_job, rank=-1, actor=member)
    members_job.refresh_from_db()
    assert members_job.rank == 0


@pytest.mark.parametrize("who", NO_ACCESS)
def test_no_role_no_priority_or_rank(request, team, who):
    job = JobFactory(team=team, state="pending")
    actor = persona(request, who)
    with pytest.raises(JobPermissionDenied):
        job_set_priority(job=job, priority="low", actor=actor)
    with pytest.raises(JobPermissionDenied):
        job_set_rank(job=job, rank=5, actor=actor)
    job.refresh_from_db()
    assert (job.priority, job.rank) == ("normal", 0) and not JobEvent.objects.exists()


def test_the_permission_comes_before_the_value(team, member):
    job = JobFactory(team=team, state="pending")
    with pytest.raises(JobPermissionDenied):
        job_set_priority(job=job, priority="asap", actor=member)


def test_the_priority_ceiling_of_a_role_is_checked_on_its_own():
    """What job_set_priority asks after check_manage: no role but member has a ceiling today, so it is shown
    here directly."""
    team = JobFactory().team
    with pytest.raises(JobPermissionDenied, match="may use normal or low priority; high needs") as caught:
        access.check_priority(actor=None, team=team, role=access.MEMBER, priority="high")
    assert caught.value.field == "priority"
    access.check_priority(actor=None, team=team, role=access.LEAD, priority="production")


# --- job_list_reorder and job_cancel_bulk -------------------------------------------------------------------


@pytest.fixture
def queue(team, member, lead):
    """Three pending jobs of the team: two the member submitted, one the lead did."""
    return [
        JobFactory(team=team, name="mine-1", state="pending", submitted_by=member),
        JobFactory(team=team, name="mine-2", state="pending", submitted_by=member),
        JobFactory(team=team, name="leads", state="pending", submitted_by=lead),
    ]


@pytest.mark.parametrize("who", MANAGERS)
def test_managers_reorder(request, team, queue, who):
    actor = persona(request, who)
    changed = job_list_reorder(team=team, order=[j.pk for j in reversed(queue)], actor=actor)
    # Ranks -2, -1, 0 in the order given (never above 0, so later work still queues behind): "mine-1", last,
    # keeps its rank 0.
    assert {j.name for j in changed} == {"leads", "mine-2"}
    ranks = dict(Job.objects.values_list("name", "rank"))
    assert ranks == {"leads": -2, "mine-2": -1, "mine-1": 0}
    assert set(JobEvent.objects.values_list("type", "actor")) == {("rank_changed", actor.pk if actor else None)}


@pytest.mark.parametrize("who", ["member", "colleague", *NO_ACCESS])
def test_no_one_else_reorders(request, team, queue, who):
    with pytest.raises(JobPermissionDenied):
        job_list_reorder(team=team, order=[j.pk for j in reversed(queue)], actor=persona(request, who))
    assert set(Job.objects.values_list("rank", flat=True)) == {0} and not JobEvent.objects.exists()


@pytest.mark.parametrize("who", MANAGERS)
def test_managers_bulk_cancel_anyones_jobs(request, queue, who):
    actor = persona(request, who)
    cancelled = job_cancel_bulk(jobs=queue, actor=actor, reason="cleanup")
    assert [j.pk for j in cancelled] == [j.pk for j in queue] and {j.state for j in cancelled} == {"cancelled"}
    assert list(JobEvent.objects.values_list("job", "type", "actor")) == [
        (j.pk, "cancelled", actor.pk if actor else None) for j in queue
    ]


def test_a_member_bulk_cancels_their_own_jobs_only_all_or_nothing(queue, member, colleague):
    mine, leads = queue[:2], queue[2]
    with pytest.raises(JobPermissionDenied, match=f"job {leads.pk} \\(leads\\) was submitted by nlp-lead"):
        job_cancel_bulk(jobs=queue, actor=member)
    assert set(Job.objects.values_list("state", flat=True)) == {"pending"} and not JobEvent.objects.exists()
    with pytest.raises(JobPermissionDenied, match="was submitted by nlp-member"):
        job_cancel_bulk(jobs=mine, actor=colleague)
    assert [j.state for j in job_cancel_bulk(jobs=mine, actor=member)] == ["cancelled", "cancelled"]


@pytest.mark.parametrize("who", NO_ACCESS)
def test_no_role_no_bulk_cancel(request, queue, who):
    with pytest.raises(JobPermissionDenied):
        job_cancel_bulk(jobs=queue, actor=persona(request, who))
    assert set(Job.objects.values_list("state", flat=True)) == {"pending"} and not JobEvent.objects.exists()


def test_a_lead_of_one_team_cannot_bulk_cancel_another_teams_job(queue, lead, outsider):
    theirs = JobFactory(team=outsider.memberships.get().team, state="pending")
    with pytest.raises(JobPermissionDenied, match="nlp-lead is not a member of team vision"):
        job_cancel_bulk(jobs=[*queue, theirs], actor=lead)
    assert set(Job.objects.values_list("state", flat=True)) == {"pending"}
