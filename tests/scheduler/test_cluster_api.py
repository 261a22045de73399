"""The cluster API (scheduler/api/): every node and GPU with who holds each slice, job names only for its team."""

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


def test_cluster_shows_holders_but_only_own_job_names(outsider, lead, team, job, node) -> None:
    theirs = api(outsider).get("/api/v1/cluster/").json()
    gpu1 = theirs["nodes"][0]["gpus"][1]["segments"][0]
    assert gpu1["holder"] == {"team": "nlp", "job": None, "job_name": ""}
    ours = api(lead).get("/api/v1/cluster/").json()["nodes"][0]["gpus"][1]["segments"][0]
    assert ours["holder"] == {"team": "nlp", "job": job.pk, "job_name": "llama-pretrain"}
    assert theirs["total_gpus"] == 8 and theirs["free_gpus"] == pytest.approx(7.0)
