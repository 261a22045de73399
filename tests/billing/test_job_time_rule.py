"""The demo's time rule: work runs 60× faster on the simulated fleet and is billed in wall time, the clock the
fleet's capacity is paid on; the job's page says so."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.services import ledger_close_interval
from tests.billing.conftest import at
from tests.factories import AllocationFactory, JobFactory

pytestmark = pytest.mark.django_db


def test_an_hour_of_work_at_60x_is_billed_as_the_minute_of_wall_time_it_held_the_gpu(prices, reserved_node):
    # One virtual hour of work at 60× holds the GPU for one real minute (scheduler.gateways.simulated).
    allocation = AllocationFactory(node=reserved_node, started_at=at(2, 9), ended_at=at(2, 9, 1))
    result = ledger_close_interval(allocation_id=allocation.pk, until=at(2, 10))
    assert result.gpu_hours == Decimal("0.016667")  # 1/60 GPU-hour: wall time, as capacity is counted


def test_the_job_page_states_the_rule_on_the_simulated_fleet_only(settings, team, client, lead, outsider):
    settings.CLUSTER_BACKEND = "simulated"
    settings.SCHEDULER = {**settings.SCHEDULER, "simulated_speed": 60.0}
    hour_ago = timezone.now() - timedelta(hours=1)
    job = JobFactory(team=team, submitted_at=hour_ago)
    client.force_login(lead)
    page = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert "Simulated at 60×: 1 min of wall time is 1 hour of job time; billed in wall time" in page
    settings.CLUSTER_BACKEND = "kubernetes"
    assert 'data-testid="job-time-rule"' not in client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404
