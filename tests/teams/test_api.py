"""The teams API (teams/api/): the reader's teams with their role, a team's dashboard and utilization series.

An outsider's 404 on every team endpoint is tests/jobs/test_api.py's, with the other endpoints."""

from __future__ import annotations

import pytest

from tests.api_client import api
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def job(team, node, member):
    return running_job(team, node, name="llama-pretrain", submitted_by=member)


def test_teams_dashboard_and_utilization(lead, team, job, outsider) -> None:
    client = api(lead)
    assert client.get("/api/v1/teams/").json() == [
        {"slug": "nlp", "name": "Language Models", "namespace": "team-nlp", "weight": 1, "role": "lead"}
    ]
    dashboard = client.get("/api/v1/teams/nlp/dashboard/").json()
    assert dashboard["running_jobs"] == 1
    assert {q["gpu_class"]: q["in_use_gpus"] for q in dashboard["quotas"]} == {"any": 1.0, "A100": 1.0}
    # No quota: guaranteed nothing, no burst limit; the training job is other non-preemptible work above it.
    overall = dashboard["quotas"][0]
    assert (overall["guaranteed_gpus"], overall["burst_gpus"], overall["other_non_preemptible_gpus"]) == (
        0.0,
        None,
        1.0,
    )
    assert (
        overall["production_above_gpus"],
        overall["other_non_preemptible_above_gpus"],
        overall["borrowed_gpus"],
    ) == (
        0.0,
        1.0,
        0.0,
    )
    assert dashboard["gpu_hours_this_month"] > 0
    series = client.get("/api/v1/teams/nlp/utilization/", {"window": "6h"}).json()
    assert series[0]["gpu_class"] == "A100" and max(series[0]["allocated_gpus"]) == pytest.approx(1.0)
    bad = client.get("/api/v1/teams/nlp/utilization/", {"window": "2y"})
    assert bad.status_code == 400 and "window" in bad.json()
