"""A job's moves on its page, the job list and the API (read-only, scoped to the user's teams), and the opt-out
``consolidate`` accepted by the API, the submit form and ``jobs submit --spec``, shown on the job page."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from jobs.models import Allocation, Job
from jobs.selectors.moves import job_moves, with_moving
from jobs.selectors.network import job_network
from jobs.services import job_move_abandon, job_move_complete, job_move_start, job_submit
from scheduler.core import Slot
from tests.api_client import api
from tests.factories import NodeFactory
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

SLICE = ((Slot(node="a100-res-01", gpu=0, mig_profile="3g.40gb", mig_start=4),),)


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def serving(team, node) -> Job:
    """An inference job on a whole GPU (GPU 1), its move to GPU 0's 3g.40gb slice under way."""
    job = running_job(team, node, name="chat-7b")
    Job.objects.filter(pk=job.pk).update(kind="inference")
    job.refresh_from_db()
    job_move_start(job=job, slots=SLICE, nodes={node.name: node}, at=timezone.now() - timedelta(minutes=1))
    return job


def _page(client, job: Job) -> str:
    response = client.get(reverse("jobs:detail", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_page_shows_a_move_under_way_and_which_replicas_serve(client, member, serving) -> None:
    client.force_login(member)

    page = _page(client, serving)

    assert 'data-testid="moving"' in page and "A move is under way" in page
    assert "serving, leaving" in page and "starting" in page
    assert "From a100-res-01 GPU 1 to a100-res-01 GPU 0 (3g.40gb)" in page and "under way" in page
    assert "Moving from a100-res-01 GPU 1 to a100-res-01 GPU 0 (3g.40gb)" in page  # the timeline's line


def test_the_job_page_shows_a_completed_and_an_abandoned_move(client, member, serving, node) -> None:
    job_move_complete(job=serving, generation=1, at=timezone.now())
    job_move_start(
        job=serving,
        slots=((Slot(node=node.name, gpu=0, mig_profile="2g.20gb", mig_start=2),),),
        nodes={node.name: node},
        at=timezone.now(),
    )
    job_move_abandon(job=serving, generation=2, at=timezone.now(), reason="the new replicas were not all ready")
    client.force_login(member)

    page = _page(client, serving)

    assert "A move is under way" not in page
    assert "complete at" in page
    assert "abandoned at" in page and "the new replicas were not all ready" in page
    assert [m.outcome for m in job_moves(job=serving)] == ["completed", "abandoned"]
    assert Allocation.objects.get(job=serving, ended_at__isnull=True).mig_profile == "3g.40gb"


@pytest.mark.parametrize(("who", "status"), [("member", 200), ("lead", 200), ("outsider", 404)])
def test_a_jobs_moves_are_read_only_within_its_team(request, client, serving, who, status) -> None:
    user = request.getfixturevalue(who)
    client.force_login(user)
    assert client.get(reverse("jobs:detail", args=[serving.pk])).status_code == status
    assert api(user).get(f"/api/v1/jobs/{serving.pk}/").status_code == status
    listed = api(user).get("/api/v1/jobs/").json()["results"]
    assert [j["id"] for j in listed] == ([serving.pk] if status == 200 else [])


def test_the_api_exposes_the_move(member, serving) -> None:
    (listed,) = api(member).get("/api/v1/jobs/").json()["results"]
    assert listed["moving"] is True and listed["consolidate"] is True

    detail = api(member).get(f"/api/v1/jobs/{serving.pk}/").json()

    (move,) = detail["moves"]
    assert move["outcome"] == "under-way" and move["generation"] == 1 and move["ended_at"] is None
    assert (move["source"], move["target"]) == ("a100-res-01 GPU 1", "a100-res-01 GPU 0 (3g.40gb)")
    assert sorted((a["generation"], a["mig_profile"]) for a in detail["allocations"]) == [(0, ""), (1, "3g.40gb")]
    job_move_complete(job=serving, generation=1, at=timezone.now())
    assert api(member).get(f"/api/v1/jobs/{serving.pk}/").json()["moving"] is False


def test_the_job_list_marks_a_moving_job_in_one_query(client, member, serving, django_assert_max_num_queries) -> None:
    client.force_login(member)
    page = client.get(reverse("jobs:list")).content.decode()
    assert 'data-testid="moving"' in page
    with django_assert_max_num_queries(1):
        assert [j.moving for j in with_moving(Job.objects.all())] == [True]


def test_the_api_takes_the_opt_out_and_explains_a_wrong_value(lead, node) -> None:
    client = api(lead)
    spec = {"team": "nlp", "kind": "inference", "gpus": 1}

    made = client.post("/api/v1/jobs/", {**spec, "consolidate": False}, format="json")
    wrong = client.post("/api/v1/jobs/", {**spec, "consolidate": "no"}, format="json")

    assert made.status_code == 201 and made.json()["consolidate"] is False
    assert Job.objects.get(pk=made.json()["id"]).consolidate is False
    assert wrong.status_code == 400 and "must be true or false, got 'no'" in wrong.json()["consolidate"][0]
    assert client.post("/api/v1/jobs/", spec, format="json").json()["consolidate"] is True  # the default


def test_the_submit_form_offers_the_opt_out_and_the_job_page_shows_it(client, lead, team, node) -> None:
    client.force_login(lead)
    assert "May be moved to its right-sized slice" in client.get(reverse("jobs:submit")).content.decode()

    client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "consolidate": "on"})
    client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "name": "stays-put"})

    assert Job.objects.get(name="chat-7b").consolidate is True
    stays = Job.objects.get(name="stays-put")
    assert stays.consolidate is False
    assert "no: it stays where it starts" in _page(client, stays)


def test_jobs_submit_reads_the_key_from_a_spec_file(team, node, tmp_path) -> None:
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({"kind": "inference", "gpus": 1, "consolidate": False}))

    call_command("jobs", "submit", "--team", "nlp", "--spec", str(path), stdout=StringIO())

    assert Job.objects.get().consolidate is False
    assert job_submit(team=team, spec={"kind": "inference", "gpus": 1}, actor=None).consolidate is True


def test_a_one_replica_job_moving_to_another_node_spans_no_network(team, node) -> None:
    other = NodeFactory(name="a100-res-02", gpu_model=node.gpu_model, gpu_count=8, tier="reserved")
    job = running_job(team, node, name="chat-7b")

    job_move_start(job=job, slots=((Slot(node=other.name, gpu=2),),), nodes={other.name: other}, at=timezone.now())

    assert job_network(job=job) is None  # its replicas talk within the placement it moves to, not across both
