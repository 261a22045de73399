"""Selectors behind the portal: queue order and scope, usage and cost, quota use, the utilization series,
the right-sizing suggestion and the role rules (the bulk changes: tests/jobs/test_services_bulk.py)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from jobs import access
from jobs.errors import JobNotFound
from jobs.selectors.jobs import job_get_for_user, job_list_queue, usage_of
from jobs.selectors.rightsizing import errors_by_key
from jobs.selectors.team_usage import team_dashboard, team_quota_use, team_utilization_series
from scheduler.models import UtilizationSample
from tests.factories import JobFactory, QuotaFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db


def test_queue_is_in_scheduler_order_with_unseen_jobs_last(team, lead, outsider) -> None:
    now = timezone.now()
    late = JobFactory(team=team, state="pending", queue_position=2, submitted_at=now)
    early = JobFactory(team=team, state="pending", queue_position=1, submitted_at=now)
    unseen_old = JobFactory(team=team, state="pending", submitted_at=now - timedelta(hours=1))
    unseen_new = JobFactory(team=team, state="pending", submitted_at=now)
    JobFactory(team=team, state="running", submitted_at=now - timedelta(hours=2), started_at=now)
    theirs = JobFactory(team=outsider.memberships.get().team, state="pending", queue_position=3)
    assert list(job_list_queue(user=lead)) == [early, late, unseen_old, unseen_new]
    assert list(job_list_queue(user=outsider)) == [theirs]


def test_job_get_hides_other_teams_jobs(lead, outsider, team) -> None:
    job = JobFactory(team=team)
    assert job_get_for_user(user=lead, job_id=job.pk) == job
    for user, job_id in ((outsider, job.pk), (lead, "abc"), (lead, 10**9)):
        with pytest.raises(JobNotFound):
            job_get_for_user(user=user, job_id=job_id)


def test_usage_counts_mig_slices_by_compute_share_and_clips_to_since() -> None:
    now = timezone.now()
    rows = [
        ("A100-SXM4-80GB", "", Decimal("2.00"), now - timedelta(hours=3), None),  # 3 h of a GPU
        ("A100-SXM4-80GB", "3g.40gb", Decimal("2.00"), now - timedelta(hours=7), now - timedelta(hours=0)),
        ("unknown-gpu", "", Decimal("1.00"), now + timedelta(hours=1), None),  # starts later: nothing
    ]
    usage = usage_of(rows, now=now)
    assert usage.gpu_hours == pytest.approx(3 + 7 * 3 / 7)
    assert usage.cost == Decimal("12.00")
    clipped = usage_of(rows, now=now, since=now - timedelta(hours=1))
    assert clipped.gpu_hours == pytest.approx(1 + 3 / 7)


def test_quota_use_reports_in_use_and_borrowed_per_class(team) -> None:
    node = fleet()
    QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=1, burst_gpus=4)
    QuotaFactory(team=team, gpu_class="A100", guaranteed_gpus=1, burst_gpus=2)
    # Preemptible work above the guarantee is borrowed (production above it: tests/jobs/test_quota_use.py).
    running_job(team, node, gpu_index=1, preemptible=True)
    running_job(team, node, name="second", gpu_index=2, preemptible=True)
    running_job(team, node, name="slice", gpu_index=0, mig_profile="3g.40gb", mig_start=4, preemptible=True)
    rows = {q.gpu_class: q for q in team_quota_use(team=team)}
    assert rows["any"].in_use_gpus == pytest.approx(2 + 3 / 7, abs=1e-3)
    assert rows["A100"].borrowed_gpus == pytest.approx(1 + 3 / 7, abs=1e-3)
    assert rows["A100"].in_use_percent_of_burst == 100.0
    dashboard = team_dashboard(team=team)
    assert dashboard.running_jobs == 3 and dashboard.pending_jobs == 0
    assert dashboard.month.gpu_hours > 0 and len(dashboard.recent_events) == 6


def test_utilization_series_credits_node_activity_to_held_capacity(team) -> None:
    node = fleet()
    now = timezone.now()
    running_job(team, node, gpu_index=1, started_at=now - timedelta(hours=10))
    running_job(
        team, node, name="slice", gpu_index=0, mig_profile="3g.40gb", mig_start=4, started_at=now - timedelta(hours=10)
    )
    # The node's held capacity was half busy during the last hour only.
    UtilizationSample.objects.bulk_create(
        [
            UtilizationSample(
                at=now - timedelta(seconds=60 * k),
                interval_s=60,
                node=node,
                gpu_class="A100",
                gpus=8.0,
                allocated_gpus=2.0,
                busy_ratio=0.125,
            )
            for k in range(60)
        ]
    )
    (series,) = team_utilization_series(team=team, window="6h", now=now)
    assert series.gpu_class == "A100"
    assert series.allocated_gpus[0] == pytest.approx(1 + 3 / 7, abs=1e-3)
    assert series.used_gpus[0] is None  # no sample: unknown, not idle
    assert series.used_gpus[-1] == pytest.approx((1 + 3 / 7) * 0.5, abs=1e-3)
    with pytest.raises(ValueError, match="window must be one of"):
        team_utilization_series(team=team, window="1y")


def test_errors_by_key_splits_source_key_and_reason() -> None:
    messages = ["spec: model.params_b: must be positive", "spec: a job spec must be a JSON object"]
    assert errors_by_key(messages, "spec") == {
        "model.params_b": ["must be positive"],
        "non_field_errors": ["a job spec must be a JSON object"],
    }


def test_roles_and_what_they_allow(lead, member, outsider, platform_admin, finance_user, team) -> None:
    assert access.team_role(user=lead, team=team) == "lead"
    assert access.team_role(user=member, team=team) == "member"
    assert access.team_role(user=outsider, team=team) is None
    assert access.team_role(user=finance_user, team=team) is None
    assert access.team_role(user=platform_admin, team=team) == "admin"
    assert access.priorities_allowed("member") == ("normal", "low")
    assert access.priorities_allowed("lead")[0] == "production" and access.priorities_allowed(None) == ()
    own = JobFactory(team=team, submitted_by=member)
    other = JobFactory(team=team, submitted_by=lead)
    assert access.can_cancel(user=member, job=own, role="member")
    assert not access.can_cancel(user=member, job=other, role="member")
    assert access.can_cancel(user=lead, job=own, role="lead") and access.can_manage("admin")
