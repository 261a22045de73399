"""Positions written at once after a change to the order (jobs.services.positions): the manage page's reorder,
a priority change, and the loop's record step, which leaves them when its plan was ordered before the change."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.errors import JobPermissionDenied
from jobs.models import Job
from jobs.services import job_set_priority, job_set_rank
from scheduler.core import Plan, Waiting
from scheduler.gateways.protocol import Observation
from scheduler.loop.record import record_plan
from tests.factories import JobFactory, grant_production
from tests.portal.fleet import fleet

pytestmark = pytest.mark.django_db


def _as_a_cycle_left_them(team, lead, names):  # type: ignore[no-untyped-def]
    """Pending jobs with the positions, estimates and reasons a cycle writes (in submit order)."""
    now = timezone.now()
    jobs = []
    for i, name in enumerate(names):
        ahead = "next in line" if i == 0 else f"{i} job{'s' if i > 1 else ''} ahead"
        jobs.append(
            JobFactory(
                team=team,
                name=name,
                state="pending",
                submitted_by=lead,
                submitted_at=now - timedelta(minutes=10 - i),
                queue_position=i + 1,
                team_queue_position=i + 1,
                eta_at=now + timedelta(minutes=5 * (i + 1)),
                state_reason=f"waiting for 1 A100 GPU; team within its guarantee; {ahead}",
            )
        )
    return jobs


def _positions() -> dict[str, tuple[int | None, int | None]]:
    return {j.name: (j.queue_position, j.team_queue_position) for j in Job.objects.filter(state="pending")}


def test_a_move_writes_fresh_positions_and_says_what_moved(client, lead, team) -> None:
    fleet()
    a, b, c = _as_a_cycle_left_them(team, lead, ["a", "b", "c"])
    client.force_login(lead)
    response = client.post(reverse("jobs:manage", args=[team.slug]), {"action": f"up:{c.pk}"}, follow=True)
    body = response.content.decode()
    assert "Moved c up to #2 in the team&#x27;s order, #2 in the cluster queue." in body
    assert "rank change" not in body
    assert _positions() == {"a": (1, 1), "c": (2, 2), "b": (3, 3)}
    c.refresh_from_db()
    b.refresh_from_db()
    a.refresh_from_db()
    # Moved jobs: the estimate came from the old order; the reason tells the new number ahead.
    assert c.eta_at is None and c.state_reason.endswith("; 1 job ahead")
    assert b.eta_at is None and b.state_reason.endswith("; 2 jobs ahead")
    assert a.eta_at is not None and a.state_reason.endswith("; next in line")  # unmoved: unchanged


def test_a_move_past_a_higher_priority_says_the_job_stays(client, lead, team) -> None:
    fleet()
    a, b = _as_a_cycle_left_them(team, lead, ["a", "b"])
    Job.objects.filter(pk=a.pk).update(priority="high")
    client.force_login(lead)
    response = client.post(reverse("jobs:manage", args=[team.slug]), {"action": f"up:{b.pk}"}, follow=True)
    assert "b stays #2 in the team&#x27;s order: priority comes first" in response.content.decode()


def test_a_priority_change_reorders_every_team_at_once(lead, team, outsider) -> None:
    fleet()
    a, b = _as_a_cycle_left_them(team, lead, ["a", "b"])
    theirs = outsider.memberships.get().team
    JobFactory(team=theirs, name="x", state="pending", queue_position=3, team_queue_position=1)
    grant_production(team, "training")  # b is training: production for it is an admin's explicit grant
    job_set_priority(job=b, priority="production", actor=lead)
    positions = _positions()
    assert positions["b"] == (1, 1) and positions["a"][1] == 2
    assert sorted(p for p, _ in positions.values()) == [1, 2, 3]  # one order across teams, no two at one place
    job_set_rank(job=a, rank=-5, actor=lead)  # a rank within its priority: a stays behind production b
    assert _positions()["b"] == (1, 1)


def test_a_plan_ordered_before_the_change_leaves_the_fresh_positions(lead, team) -> None:
    fleet()
    a, b = _as_a_cycle_left_them(team, lead, ["a", "b"])
    ordered = {str(a.pk): ("normal", 0), str(b.pk): ("normal", 0)}  # the snapshot the plan was made from
    job_set_priority(job=b, priority="high", actor=lead)
    assert _positions() == {"b": (1, 1), "a": (2, 2)}
    stale = Plan(
        waiting=(
            Waiting(str(a.pk), 1, 1, "waiting for 1 A100 GPU; team within its guarantee; next in line", 60.0),
            Waiting(str(b.pk), 2, 2, "waiting for 1 A100 GPU; team within its guarantee; 1 job ahead", 120.0),
        )
    )
    observation = Observation(observed_at=timezone.now().timestamp(), nodes=(), jobs={})
    record_plan(stale, observation, at=timezone.now(), fence_token=None, ordered=ordered)
    assert _positions() == {"b": (1, 1), "a": (2, 2)}
    fresh = {str(a.pk): ("normal", 0), str(b.pk): ("high", 0)}  # a plan that saw the change writes its own
    record_plan(stale, observation, at=timezone.now(), fence_token=None, ordered=fresh)
    assert _positions() == {"a": (1, 1), "b": (2, 2)}


def test_only_a_lead_or_a_platform_admin_moves_the_queue(
    client, lead, member, finance_user, outsider, platform_admin, team
) -> None:
    fleet()
    _, b = _as_a_cycle_left_them(team, lead, ["a", "b"])
    url = reverse("jobs:manage", args=[team.slug])
    for user, status in ((member, 403), (finance_user, 404), (outsider, 404)):
        client.force_login(user)
        assert client.post(url, {"action": f"up:{b.pk}"}).status_code == status
        with pytest.raises(JobPermissionDenied):
            job_set_priority(job=b, priority="high", actor=user)
    assert _positions() == {"a": (1, 1), "b": (2, 2)}  # nothing moved, nothing written
    job_set_priority(job=b, priority="high", actor=platform_admin)
    assert _positions() == {"b": (1, 1), "a": (2, 2)}
