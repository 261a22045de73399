"""A job's replica logs on the job page, as a download and through the API: the same scoping as the job page
(an outsider and a finance user outside the team get 404), live polling only while the job may run, a short
message instead of a 500 when the cluster cannot be read, and parameters checked with a message."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import Allocation
from scheduler.errors import GatewayRetryable
from scheduler.gateways import gateway_override
from scheduler.gateways.protocol import LogSource, ReplicaLog
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

POLL = re.compile(r'id="job-logs"[^>]*hx-trigger="every')


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def job(team, node, member):
    return running_job(team, node, name="llama-pretrain", submitted_by=member)


class ClusterLogs:
    """A gateway whose pods wrote ``text`` (a Kubernetes cluster as the job page sees it); records each read."""

    name = "kubernetes"

    def __init__(self, text: str = "", error: Exception | None = None) -> None:
        self.text, self.error = text, error
        self.reads: list[dict] = []

    def job_logs(self, **kwargs) -> ReplicaLog:
        self.reads.append(kwargs)
        if self.error is not None:
            raise self.error
        return ReplicaLog(replica=kwargs["replica"], text=self.text, source=LogSource.KUBERNETES)


def _urls(job) -> list[str]:
    return [
        reverse("jobs:detail", args=[job.pk]),
        reverse("jobs:logs", args=[job.pk]),
        reverse("jobs:logs_download", args=[job.pk]),
        f"/api/v1/jobs/{job.pk}/logs/",
    ]


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_simulated_fleet_shows_the_replicas_lifecycle_and_says_so(client, lead, job, node) -> None:
    client.force_login(lead)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert 'data-testid="lifecycle-only"' in body and "Simulated fleet: lifecycle only" in body
    text = re.search(r'<pre class="log" data-testid="log-text">(.*?)</pre>', body, re.S).group(1)
    allocation = Allocation.objects.get(job=job)
    assert text.strip().endswith(
        f"bound to node {node.name} ({node.gpu_model.name}, {node.tier}): GPU {allocation.gpu_index}"
    )
    assert len(text.strip().splitlines()) == 1  # nothing else happened to it: no invented output


@pytest.mark.parametrize("who", ["lead", "member", "platform_admin"])
def test_the_team_reads_the_log_on_the_page_in_the_download_and_through_the_api(client, request, who, job) -> None:
    user = request.getfixturevalue(who)
    cluster = ClusterLogs("step 1 loss 2.0\nstep 2 loss <1.5>\n")
    client.force_login(user)
    with gateway_override(cluster):
        page = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
        download = client.get(reverse("jobs:logs_download", args=[job.pk]), {"replica": "0"})
        api = _api(user).get(f"/api/v1/jobs/{job.pk}/logs/", {"replica": "0", "tail": "50"})
    assert "step 2 loss &lt;1.5&gt;" in page and "lifecycle-only" not in page  # escaped, and no simulated notice
    assert download.status_code == 200 and download.content.decode() == cluster.text
    assert download["Content-Type"] == "text/plain; charset=utf-8"
    assert download["Content-Disposition"] == f'attachment; filename="job-{job.pk}-replica-0.log"'
    assert api.status_code == 200
    assert api.json() == {
        "job": job.pk,
        "replica": 0,
        "tail": 50,
        "source": "kubernetes",
        "truncated": False,
        "note": "",
        "text": cluster.text,
    }
    page_read, download_read, api_read = cluster.reads
    assert page_read["namespace"] == job.team.namespace and page_read["job"] == str(job.pk)
    assert (page_read["tail_lines"], api_read["tail_lines"]) == (200, 50)
    assert download_read["limit_bytes"] > page_read["limit_bytes"]  # the download gives more than the page


@pytest.mark.parametrize("who", ["outsider", "finance_user"])
def test_who_may_not_see_the_job_gets_404_everywhere_and_nothing_is_read(client, request, who, job) -> None:
    user = request.getfixturevalue(who)
    cluster = ClusterLogs("secret training output\n")
    client.force_login(user)
    with gateway_override(cluster):
        for url in _urls(job)[:3]:
            assert client.get(url).status_code == 404, url
        assert _api(user).get(_urls(job)[3]).status_code == 404
    assert cluster.reads == []


def test_anonymous_readers_sign_in_first(client, job) -> None:
    for url in _urls(job)[1:3]:
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert APIClient().get(_urls(job)[3]).status_code in (401, 403)


def test_the_log_polls_while_the_job_runs_and_stops_when_it_ends(client, lead, job) -> None:
    client.force_login(lead)
    logs = reverse("jobs:logs", args=[job.pk])
    assert POLL.search(client.get(reverse("jobs:detail", args=[job.pk])).content.decode())
    partial = client.get(logs, {"replica": "0"}, HTTP_HX_REQUEST="true").content.decode()
    assert POLL.search(partial) and f'hx-get="{logs}?replica=0"' in partial

    job.state, job.finished_at = "completed", timezone.now()
    job.save(update_fields=["state", "finished_at"])
    # The poll's next answer has no trigger: htmx swaps it in and stops asking.
    partial = client.get(logs, {"replica": "0"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'id="job-logs"' in partial and not POLL.search(partial)
    assert not POLL.search(client.get(reverse("jobs:detail", args=[job.pk])).content.decode())


def test_a_cluster_that_cannot_be_read_is_a_message_not_a_500(client, lead, job) -> None:
    client.force_login(lead)
    cluster = ClusterLogs(error=GatewayRetryable("read the log of pod team-nlp/mc-1-0 failed 2 times, last: 503"))
    with gateway_override(cluster):
        page = client.get(reverse("jobs:detail", args=[job.pk]))
        partial = client.get(reverse("jobs:logs", args=[job.pk]))
        download = client.get(reverse("jobs:logs_download", args=[job.pk]))
        api = _api(lead).get(f"/api/v1/jobs/{job.pk}/logs/")
    for response in (page, partial):
        assert response.status_code == 200
        assert 'data-testid="log-error"' in response.content.decode()
        assert "The log cannot be read right now: read the log of pod" in response.content.decode()
    assert download.status_code == 503 and "try again" in download.content.decode()
    assert "attachment" not in download.get("Content-Disposition", "")
    assert api.status_code == 503 and "cannot give the log right now" in api.json()["detail"]


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ({"replica": "1"}, "replica", "from 0 to 0: this job has 1 replica"),
        ({"replica": "-1"}, "replica", "whole number"),
        ({"replica": "abc"}, "replica", "whole number"),
        ({"replica": "²"}, "replica", "whole number"),
        ({"tail": "0"}, "tail", "from 1 to 10000"),
        ({"tail": "10001"}, "tail", "from 1 to 10000"),
        ({"tail": "1e3"}, "tail", "whole number"),
    ],
)
def test_parameters_are_checked_with_a_message(client, lead, job, query, field, message) -> None:
    cluster = ClusterLogs("x\n")
    client.force_login(lead)
    with gateway_override(cluster):
        api = _api(lead).get(f"/api/v1/jobs/{job.pk}/logs/", query)
        download = client.get(reverse("jobs:logs_download", args=[job.pk]), query)
        # The panel takes only a replica (it always shows the page's tail).
        partial = client.get(reverse("jobs:logs", args=[job.pk]), query) if field == "replica" else None
    assert api.status_code == 400 and message in " ".join(api.json()[field])
    assert download.status_code == 400 and message in download.content.decode()
    if partial is not None:
        assert partial.status_code == 400 and message in partial.content.decode()
    assert cluster.reads == []


def test_each_replica_of_a_gang_has_its_log(client, lead, job) -> None:
    job.replicas = 3
    job.save(update_fields=["replicas"])
    cluster = ClusterLogs("from a replica\n")
    client.force_login(lead)
    with gateway_override(cluster):
        page = client.get(reverse("jobs:detail", args=[job.pk]), {"replica": "2"}).content.decode()
        bad = client.get(reverse("jobs:detail", args=[job.pk]), {"replica": "9"})
    assert 'name="replica"' in page and 'max="2"' in page  # the replica chooser
    assert "replica 2 of 3" in page and "?replica=2" in page
    assert bad.status_code == 200  # the page itself is never refused for a replica it does not have
    assert [read["replica"] for read in cluster.reads] == [2, 0]
