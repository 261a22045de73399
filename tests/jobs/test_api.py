"""The REST API under /api/v1/: authentication, scoping (outsiders get 404 on every endpoint), role checks,
filters, pagination, JSON errors with field messages, and the OpenAPI schema."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.models import Job, JobEvent
from tests.api_client import api
from tests.assets import asset_urls, external_assets
from tests.factories import JobFactory
from tests.portal.fleet import fleet, pending_queue, running_job

pytestmark = pytest.mark.django_db

SPEC = {
    "team": "nlp",
    "name": "chat-7b",
    "kind": "inference",
    "model": {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8},
    "replicas": 2,
}


@pytest.fixture
def node(db):
    return fleet()


@pytest.fixture
def job(team, node, member):
    return running_job(team, node, name="llama-pretrain", submitted_by=member)


@pytest.fixture
def pending(team, lead):
    return JobFactory(team=team, name="waiting-job", submitted_by=lead, state="pending")


def every_endpoint(team, job):
    """(method, path, body) for every endpoint that names a team or a job."""
    return [
        ("get", f"/api/v1/jobs/{job.pk}/", None),
        ("get", f"/api/v1/jobs/{job.pk}/events/", None),
        ("get", f"/api/v1/jobs/{job.pk}/checkpoints/", None),
        ("post", f"/api/v1/jobs/{job.pk}/cancel/", {}),
        ("post", f"/api/v1/jobs/{job.pk}/priority/", {"priority": "high"}),
        ("post", f"/api/v1/jobs/{job.pk}/rank/", {"rank": 3}),
        ("get", f"/api/v1/teams/{team.slug}/", None),
        ("get", f"/api/v1/teams/{team.slug}/dashboard/", None),
        ("get", f"/api/v1/teams/{team.slug}/utilization/", None),
        ("post", "/api/v1/jobs/", {**SPEC, "team": team.slug}),
        ("post", "/api/v1/jobs/bulk-cancel/", {"team": team.slug, "job_ids": [job.pk]}),
        ("post", "/api/v1/queue/reorder/", {"team": team.slug, "job_ids": [job.pk]}),
    ]


def test_anonymous_requests_are_refused(team, job) -> None:
    for method, path, body in every_endpoint(team, job):
        assert getattr(api(), method)(path, body, format="json").status_code in (401, 403), path
    assert api().get("/api/v1/queue/").status_code in (401, 403)


def test_outsider_gets_404_on_every_endpoint_and_changes_nothing(outsider, team, job) -> None:
    client = api(outsider)
    for method, path, body in every_endpoint(team, job):
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == 404, (path, response.content)
        assert response["Content-Type"] == "application/json"
    job.refresh_from_db()
    assert (job.state, job.priority, job.rank) == ("running", "normal", 0)
    assert Job.objects.count() == 1
    for path in ("/api/v1/jobs/", "/api/v1/queue/", "/api/v1/teams/"):
        assert "llama-pretrain" not in api(outsider).get(path).content.decode()
        assert '"nlp"' not in api(outsider).get(path).content.decode()


def test_token_and_session_authentication(client, lead, team, job) -> None:
    token = Token.objects.create(user=lead)
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert by_token.get("/api/v1/jobs/").json()["count"] == 1
    client.force_login(lead)
    assert client.get("/api/v1/jobs/").json()["results"][0]["name"] == "llama-pretrain"
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token nope")
    assert bad.get("/api/v1/jobs/").status_code == 401


def test_api_token_page_creates_and_replaces_the_token(client, lead) -> None:
    client.force_login(lead)
    assert "no token yet" in client.get("/accounts/token/").content.decode()
    client.post("/accounts/token/")
    first = Token.objects.get(user=lead).key
    shown = client.post("/accounts/token/")
    second = Token.objects.get(user=lead).key
    assert first != second and second in shown.content.decode()
    assert second not in client.get("/accounts/token/").content.decode()  # shown once (tests/portal/test_api_token.py)


def test_submit_by_model_profile(lead, node) -> None:
    response = api(lead).post("/api/v1/jobs/", SPEC, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "pending" and body["replicas"] == 2
    assert body["waiting_reason"] == "waiting for the next scheduling cycle"
    assert body["events"][0]["type"] == "submitted" and body["events"][0]["actor"] == "nlp-lead"
    assert body["model"]["mode"] == "inference"


def test_submit_errors_are_json_with_field_messages(lead, team) -> None:
    client = api(lead)
    both = client.post("/api/v1/jobs/", {**SPEC, "gpus": 2}, format="json")
    assert both.status_code == 400
    assert "exactly one way" in both.json()["non_field_errors"][0]
    typed = client.post("/api/v1/jobs/", {**SPEC, "model": {"params_b": -1}, "replicas": 0}, format="json")
    assert typed.status_code == 400
    assert set(typed.json()) == {"model.params_b", "replicas"} and "positive" in typed.json()["model.params_b"][0]
    service = client.post("/api/v1/jobs/", {**SPEC, "project": "nope"}, format="json")
    assert service.status_code == 400
    assert "has no project 'nope'" in service.json()["project"][0]
    unknown_profile = client.post(
        "/api/v1/jobs/", {k: v for k, v in SPEC.items() if k != "model"} | {"mig_profile": "9g.1tb"}, format="json"
    )
    assert unknown_profile.status_code == 400 and "mig_profile" in unknown_profile.json()
    assert not Job.objects.exists()


def test_member_priority_and_rank_are_limited(member, team) -> None:
    client = api(member)
    high = client.post("/api/v1/jobs/", {**SPEC, "priority": "high"}, format="json")
    assert high.status_code == 400 and "allows normal, low" in high.json()["priority"][0]
    ranked = client.post("/api/v1/jobs/", {**SPEC, "rank": -5}, format="json")
    assert ranked.status_code == 400 and "rank" in ranked.json()
    assert client.post("/api/v1/jobs/", {**SPEC, "priority": "low"}, format="json").status_code == 201


def test_member_cannot_reprioritise_but_cancels_own(member, job, pending) -> None:
    client = api(member)
    denied = client.post(f"/api/v1/jobs/{pending.pk}/priority/", {"priority": "high"}, format="json")
    assert denied.status_code == 403 and "lead" in denied.json()["detail"]
    assert client.post(f"/api/v1/jobs/{pending.pk}/rank/", {"rank": 1}, format="json").status_code == 403
    assert client.post(f"/api/v1/jobs/{pending.pk}/cancel/", {}, format="json").status_code == 403
    ok = client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": "done"}, format="json")
    assert ok.status_code == 200 and ok.json()["state"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


def test_lead_reprioritises_and_reranks_with_events(lead, pending) -> None:
    client = api(lead)
    body = client.post(f"/api/v1/jobs/{pending.pk}/priority/", {"priority": "high"}, format="json").json()
    assert body["priority"] == "high"
    assert body["events"][-1] == {
        "type": "priority_changed",
        "at": body["events"][-1]["at"],
        "actor": "nlp-lead",
        "details": {"old": "normal", "new": "high"},
    }
    assert client.post(f"/api/v1/jobs/{pending.pk}/priority/", {"priority": "urgent"}, format="json").json() == {
        "priority": ['"urgent" is not a valid choice.']
    }
    assert client.post(f"/api/v1/jobs/{pending.pk}/rank/", {"rank": 4}, format="json").json()["rank"] == 4
    events = client.get(f"/api/v1/jobs/{pending.pk}/events/").json()
    assert [e["type"] for e in events] == ["priority_changed", "rank_changed"]


def test_bulk_cancel_and_reorder(lead, team, outsider) -> None:
    a, b, c = (JobFactory(team=team, name=n, state="pending", submitted_by=lead) for n in ("a", "b", "c"))
    theirs = JobFactory(team=outsider.memberships.get().team, state="pending")
    client = api(lead)
    reordered = client.post("/api/v1/queue/reorder/", {"team": "nlp", "job_ids": [c.pk, a.pk, b.pk]}, format="json")
    assert reordered.status_code == 200
    assert [j["name"] for j in sorted(reordered.json(), key=lambda j: j["rank"])] == ["c", "a", "b"]
    partial = client.post("/api/v1/queue/reorder/", {"team": "nlp", "job_ids": [c.pk]}, format="json")
    assert partial.status_code == 400 and "exactly once" in partial.json()["order"][0]
    mixed = client.post("/api/v1/jobs/bulk-cancel/", {"team": "nlp", "job_ids": [a.pk, theirs.pk]}, format="json")
    assert mixed.status_code == 400 and str(theirs.pk) in mixed.json()["job_ids"][0]
    done = client.post("/api/v1/jobs/bulk-cancel/", {"team": "nlp", "job_ids": [a.pk, b.pk]}, format="json")
    assert [j["state"] for j in done.json()] == ["cancelled", "cancelled"]
    assert JobEvent.objects.filter(type="cancelled", actor=lead).count() == 2
    theirs.refresh_from_db()
    assert theirs.state == "pending"


def test_member_cannot_bulk_cancel_or_reorder(member, pending) -> None:
    client = api(member)
    body = {"team": "nlp", "job_ids": [pending.pk]}
    assert client.post("/api/v1/jobs/bulk-cancel/", body, format="json").status_code == 403
    assert client.post("/api/v1/queue/reorder/", body, format="json").status_code == 403


def test_queue_positions_filters_and_pagination(lead, team) -> None:
    pending_queue(team, 60, submitted_by=lead)
    JobFactory(team=team, name="fresh-one", state="pending", priority="low")
    client = api(lead)
    first = client.get("/api/v1/queue/").json()
    assert first["count"] == 61 and len(first["results"]) == 50 and first["next"]
    top = first["results"][0]
    assert (top["queue_position"], top["team_queue_position"]) == (1, 1)
    assert top["eta_at"] and "higher priority" in top["waiting_reason"]
    last = client.get(first["next"]).json()["results"][-1]
    assert last["name"] == "fresh-one" and last["waiting_reason"] == "waiting for the next scheduling cycle"
    assert client.get("/api/v1/queue/", {"priority": "low"}).json()["count"] == 1
    assert client.get("/api/v1/queue/", {"name": "queued-0005"}).json()["count"] == 10
    bad = client.get("/api/v1/queue/", {"priority": "urgent"})
    assert bad.status_code == 400 and "priority" in bad.json()


def test_job_list_filters(member, team, job, pending) -> None:
    client = api(member)
    assert [j["name"] for j in client.get("/api/v1/jobs/", {"state": "running"}).json()["results"]] == [
        "llama-pretrain"
    ]
    assert client.get("/api/v1/jobs/", {"mine": "true"}).json()["count"] == 1
    assert client.get("/api/v1/jobs/", {"team": "vision"}).json()["count"] == 0


def test_job_detail_has_placement_and_usage(member, job) -> None:
    body = api(member).get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["allocations"][0]["node"] == "a100-res-01"
    assert body["usage"]["gpu_hours"] == pytest.approx(2.0, abs=0.01)
    assert float(body["usage"]["cost"]) == pytest.approx(4.2, abs=0.05)


def test_rightsize(member, node) -> None:
    body = api(member).post(
        "/api/v1/rightsize/", {"kind": "inference", "model": {"params_b": 13, "context": 8192}}, format="json"
    )
    assert body.status_code == 200
    assert body.json()["best"]["mig_profile"] == "3g.40gb" and body.json()["memory_gib"] > 30
    training = api(member).post("/api/v1/rightsize/", {"kind": "training", "memory_gib": 200}, format="json").json()
    assert training["best"]["gpus"] == 3 and training["best"]["mig_profile"] is None
    bad = api(member).post("/api/v1/rightsize/", {"kind": "inference"}, format="json")
    assert bad.status_code == 400 and "exactly one way" in bad.json()["non_field_errors"][0]


def test_schema_and_docs_are_served_without_a_cdn(client) -> None:
    schema = client.get("/api/schema/", {"format": "json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in ("/api/v1/queue/", "/api/v1/jobs/", "/api/v1/jobs/{id}/cancel/", "/api/v1/cluster/"):
        assert path in paths, path
    docs = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in docs and external_assets(docs) == []
    assert any(url.startswith("/static/") for url in asset_urls(docs))


def test_platform_admin_reaches_every_team(platform_admin, team, job) -> None:
    client = api(platform_admin)
    for method, path, body in every_endpoint(team, job)[:8]:
        assert getattr(client, method)(path, body, format="json").status_code in (200, 201, 409), path
