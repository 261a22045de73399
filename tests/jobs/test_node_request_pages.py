"""A job's node request on its page and in the API, scoped as the job is: an outsider gets 404 for both."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.models import Job, JobEvent
from scheduler.autoscaled import AutoscaledPool, Autoscaler, NodeRequest
from scheduler.core.model.vocabulary import EventType
from scheduler.models import GpuModel
from scheduler.services.fleet import gpu_models_sync

pytestmark = pytest.mark.django_db

ASKED = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def _waiting_with_request(team, member) -> Job:  # type: ignore[no-untyped-def]
    gpu_models_sync()
    job = Job.objects.create(
        team=team, name="peak", kind="training", gpus=8, submitted_by=member, submitted_at=ASKED - timedelta(minutes=5)
    )
    pool = AutoscaledPool.objects.create(
        name="h100-od",
        autoscaler=Autoscaler.KARPENTER,
        provisioning_class="",
        node_selector={"karpenter.sh/nodepool": "h100-od"},
        gpu_model=GpuModel.objects.get(name="H100-SXM5-80GB"),
        gpus_per_node=8,
        max_nodes=4,
    )
    NodeRequest.objects.create(
        job=job,
        pool=pool,
        nodes=2,
        gpus_per_node=8,
        gpu_hours=Decimal(32),
        state="pending",
        requested_at=ASKED,
        state_since=ASKED,
        arrives_at=ASKED + timedelta(minutes=10),
    )
    return job


def _api(user) -> APIClient:  # type: ignore[no-untyped-def]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return api


def test_the_job_page_and_the_api_show_the_node_request(client, team, member) -> None:
    job = _waiting_with_request(team, member)
    client.force_login(member)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert 'data-testid="node-request"' in body
    assert "2 × 8 GPUs of pool h100-od" in body and "pending" in body
    request = _api(member).get(f"/api/v1/jobs/{job.pk}/").json()["node_request"]
    assert request == {
        "state": "pending",
        "pool": "h100-od",
        "nodes": 2,
        "gpus_per_node": 8,
        "requested_at": "2026-12-05T09:00:00Z",
        "arrives_at": "2026-12-05T09:10:00Z",
        "state_since": "2026-12-05T09:00:00Z",
        "message": "",
        "node_names": [],
    }


def test_the_job_page_timeline_tells_the_request_steps_and_an_outsider_gets_404(client, team, member, outsider) -> None:
    job = _waiting_with_request(team, member)
    row = job.node_requests.get()
    JobEvent.objects.create(
        job=job,
        type=EventType.NODE_REQUEST,
        at=ASKED + timedelta(minutes=3),
        details={"state": "failed", "request": str(row.pk), "message": "CapacityIsNotFound: no H100 capacity"},
    )
    client.force_login(member)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert f"On-demand node request failed: CapacityIsNotFound: no H100 capacity (request {row.pk})" in body
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404


def test_a_job_without_a_request_shows_none(client, team, member) -> None:
    job = Job.objects.create(team=team, name="small", kind="training", gpus=1, submitted_by=member, submitted_at=ASKED)
    client.force_login(member)
    assert 'data-testid="node-request"' not in client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert _api(member).get(f"/api/v1/jobs/{job.pk}/").json()["node_request"] is None


def test_an_outsider_sees_neither_the_job_nor_its_request(client, team, member, outsider) -> None:
    job = _waiting_with_request(team, member)
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404
    assert _api(outsider).get(f"/api/v1/jobs/{job.pk}/").status_code == 404
