"""Idempotent writes: the API's ``Idempotency-Key`` header on a submit and every job write,
and the submit form's hidden key. A retry answers the first answer and writes nothing again; the same key with
another body is a 422, a malformed key a 400, a key older than 24 hours a new key; keys are per user.

The faults themselves (connections dropped around real submits over HTTP): test_idempotency_faults.py.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.errors import IdempotencyKeyInFlight
from jobs.idempotency import KEY_TTL, Answer, fingerprint, idempotent_write
from jobs.models import IdempotencyKey, Job, JobEvent
from tests.factories import JobFactory, MembershipFactory, UserFactory
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import fleet

pytestmark = pytest.mark.django_db

SPEC = {
    "team": "nlp",
    "name": "chat-7b",
    "kind": "inference",
    "model": {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8},
}


@pytest.fixture
def node(db):
    return fleet()


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(client: APIClient, key: str | None, body: dict[str, Any] | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post("/api/v1/jobs/", body or SPEC, format="json", headers=headers)


# --- the API's submit -------------------------------------------------------------------------------------------


def test_the_same_key_and_body_answer_the_first_answer_and_make_one_job(lead, node) -> None:
    client = api(lead)
    first = submit(client, "c7b-0001")
    assert first.status_code == 201, first.json()
    assert "Idempotent-Replayed" not in first
    again = submit(client, "c7b-0001", {**SPEC, "name": "chat-7b"})  # the same body, keys in another order
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert Job.objects.count() == 1 and JobEvent.objects.count() == 1
    assert IdempotencyKey.objects.get().body["id"] == first.json()["id"]


def test_without_a_key_every_submit_is_a_job(lead, node) -> None:
    client = api(lead)
    assert submit(client, None).status_code == submit(client, None).status_code == 201
    assert Job.objects.count() == 2 and not IdempotencyKey.objects.exists()


def test_the_same_key_with_another_body_is_a_422_and_writes_nothing(lead, node) -> None:
    client = api(lead)
    assert submit(client, "k-1").status_code == 201
    other = submit(client, "k-1", {**SPEC, "name": "chat-13b"})
    assert other.status_code == 422
    assert other["Content-Type"] == "application/json"
    assert "already used for a different request" in other.json()["detail"]
    assert list(Job.objects.values_list("name", flat=True)) == ["chat-7b"]


def test_keys_are_per_user(lead, team, node) -> None:
    other_lead = MembershipFactory(team=team, role="lead", user=UserFactory(username="nlp-lead-2")).user
    assert submit(api(lead), "shared-key").status_code == 201
    theirs = submit(api(other_lead), "shared-key")
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs
    assert Job.objects.count() == 2


def test_a_replay_never_shows_one_users_answer_to_another(lead, outsider, node) -> None:
    """The outsider sends the lead's key with the lead's body: their own request (a 404 for a team not theirs),
    never the lead's stored job."""
    assert submit(api(lead), "lead-key").status_code == 201
    response = submit(api(outsider), "lead-key")
    assert response.status_code == 404
    assert Job.objects.count() == 1


def test_a_refused_submit_keeps_no_key_so_the_fixed_request_can_use_it(lead, node) -> None:
    client = api(lead)
    bad = submit(client, "k-2", {**SPEC, "replicas": 0})
    assert bad.status_code == 400
    assert not IdempotencyKey.objects.exists() and not Job.objects.exists()
    assert submit(client, "k-2").status_code == 201


def test_a_key_older_than_24_hours_is_a_new_key(lead, node) -> None:
    client = api(lead)
    first = submit(client, "old-key").json()
    IdempotencyKey.objects.update(created_at=timezone.now() - KEY_TTL - timedelta(seconds=1))
    again = submit(client, "old-key")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert again.json()["id"] != first["id"]
    assert IdempotencyKey.objects.count() == 1  # the expired row went


def test_a_users_expired_keys_are_removed_with_their_next_key(lead, node) -> None:
    client = api(lead)
    submit(client, "a")
    IdempotencyKey.objects.update(created_at=timezone.now() - KEY_TTL - timedelta(minutes=1))
    submit(client, "b", {**SPEC, "name": "b"})
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["b"]


@pytest.mark.parametrize(
    "key, says",
    [
        ("", "is empty"),
        ('""', "is empty"),
        ("x" * 256, "256 characters; at most 255"),
        ("tab\there", "printable ASCII"),
        ("café", "printable ASCII"),
    ],
)
def test_a_malformed_key_is_a_400_that_says_why(lead, node, key, says) -> None:
    response = submit(api(lead), key)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert says in response.json()["detail"]
    assert not Job.objects.exists()


def test_the_drafts_quoted_form_and_255_characters_are_accepted(lead, node) -> None:
    client = api(lead)
    assert submit(client, '"quoted-key"').status_code == 201
    assert IdempotencyKey.objects.get().key == "quoted-key"
    assert submit(client, "quoted-key")["Idempotent-Replayed"] == "true"  # the same key, bare
    assert submit(client, "k" * 255, {**SPEC, "name": "long"}).status_code == 201


# --- the other writes ---------------------------------------------------------------------------------------------


def test_a_retried_bulk_cancel_answers_its_first_answer_not_a_409(lead, team) -> None:
    jobs = [JobFactory(team=team, submitted_by=lead, state="pending") for _ in range(2)]
    body = {"team": "nlp", "job_ids": [j.pk for j in jobs]}
    client = api(lead)
    first = client.post("/api/v1/jobs/bulk-cancel/", body, format="json", headers={"Idempotency-Key": "bc-1"})
    assert first.status_code == 200
    again = client.post("/api/v1/jobs/bulk-cancel/", body, format="json", headers={"Idempotency-Key": "bc-1"})
    assert again.status_code == 200 and again.json() == first.json()
    assert JobEvent.objects.filter(type="cancelled").count() == 2
    # Without the key the retry is what it always was: the jobs have ended.
    assert client.post("/api/v1/jobs/bulk-cancel/", body, format="json").status_code == 409


@pytest.mark.parametrize(
    "action, body",
    [("cancel", {}), ("priority", {"priority": "high"}), ("rank", {"rank": 3})],
)
def test_each_job_action_replays(lead, team, action, body) -> None:
    job = JobFactory(team=team, submitted_by=lead, state="pending")
    client = api(lead)
    url = f"/api/v1/jobs/{job.pk}/{action}/"
    first = client.post(url, body, format="json", headers={"Idempotency-Key": f"{action}-1"})
    assert first.status_code == 200, first.json()
    again = client.post(url, body, format="json", headers={"Idempotency-Key": f"{action}-1"})
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert job.events.count() == 1
    # The same key on another job's endpoint is another request.
    other = JobFactory(team=team, submitted_by=lead, state="pending")
    reused = client.post(
        f"/api/v1/jobs/{other.pk}/{action}/", body, format="json", headers={"Idempotency-Key": f"{action}-1"}
    )
    assert reused.status_code == 422


def test_a_retried_reorder_replays(lead, team) -> None:
    jobs = [JobFactory(team=team, submitted_by=lead, state="pending") for _ in range(2)]
    body = {"team": "nlp", "job_ids": [jobs[1].pk, jobs[0].pk]}
    client = api(lead)
    first = client.post("/api/v1/queue/reorder/", body, format="json", headers={"Idempotency-Key": "ro"})
    again = client.post("/api/v1/queue/reorder/", body, format="json", headers={"Idempotency-Key": "ro"})
    assert first.status_code == again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"


def test_the_schema_documents_the_header_and_the_422(lead) -> None:
    schema = api(lead).get("/api/schema/", {"format": "json"}).json()
    submit_op = schema["paths"]["/api/v1/jobs/"]["post"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in submit_op["parameters"])
    assert "422" in submit_op["responses"] and "409" in submit_op["responses"]
    read = schema["paths"]["/api/v1/jobs/"]["get"]
    assert not any(p["name"] == "Idempotency-Key" for p in read.get("parameters", []))
    assert "422" not in read["responses"]


# --- in flight ----------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_key_still_in_flight_is_a_409_and_the_retry_after_it_replays(lead, team, node) -> None:
    """PostgreSQL: a second request with the key while the first one's transaction is open is refused at once;
    SQLite runs one writing transaction at a time, so there the second waits and replays (module doc)."""
    if connection.vendor != "postgresql":
        pytest.skip("two transactions at once need PostgreSQL (DATABASE_URL=postgres://...); SQLite serialises them")
    inside, release = threading.Event(), threading.Event()
    digest = fingerprint(endpoint="POST /api/v1/jobs/", body={"x": 1})

    def slow_write() -> Answer:
        inside.set()
        release.wait(10)
        return Answer(201, {"id": 1})

    def first() -> None:
        try:
            idempotent_write(user=lead, key="slow", fingerprint=digest, write=slow_write)
        finally:
            connections.close_all()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(IdempotencyKeyInFlight, match="still being answered"):
            idempotent_write(user=lead, key="slow", fingerprint=digest, write=lambda: Answer(201, {"id": 2}))
        # Another key of the same user is not held up.
        idempotent_write(user=lead, key="other", fingerprint=digest, write=lambda: Answer(201, {"id": 3}))
    finally:
        release.set()
        thread.join(10)
    outcome = idempotent_write(user=lead, key="slow", fingerprint=digest, write=lambda: Answer(201, {"id": 4}))
    assert outcome.replayed and outcome.answer.body == {"id": 1}


def test_the_api_answers_an_in_flight_key_with_409_and_retry_after(lead, node, monkeypatch) -> None:
    def in_flight(**kwargs: Any) -> None:
        raise IdempotencyKeyInFlight("a request with Idempotency-Key 'k' is still being answered")

    monkeypatch.setattr("jobs.api.idempotency.idempotent_write", in_flight)
    response = submit(api(lead), "k")
    assert response.status_code == 409 and response["Retry-After"] == "1"
    assert "still being answered" in response.json()["detail"]


# --- the submit form ----------------------------------------------------------------------------------------------


def _form_key(client: Any) -> str:
    page = client.get(reverse("jobs:submit")).content.decode()
    marker = 'name="idempotency_key" value="'
    assert marker in page, "the submit page carries no idempotency key"
    return page.split(marker, 1)[1].split('"', 1)[0]


def test_each_rendering_of_the_submit_page_carries_a_new_key(client, lead, node) -> None:
    client.force_login(lead)
    first, second = _form_key(client), _form_key(client)
    assert len(first) == 32 and first != second


def test_a_resubmitted_form_redirects_to_the_job_it_made(client, lead, team, node) -> None:
    client.force_login(lead)
    data = {**SUBMIT, "team": team.pk, "idempotency_key": _form_key(client)}
    first = client.post(reverse("jobs:submit"), data)
    job = Job.objects.get()
    assert first.status_code == 302 and first.url == reverse("jobs:detail", args=[job.pk])
    again = client.post(reverse("jobs:submit"), data)  # a double click, or a reload after a lost answer
    assert again.status_code == 302 and again.url == first.url
    assert Job.objects.count() == 1
    page = client.get(again.url).content.decode()
    assert "already submitted" in page


def test_the_same_page_sent_with_other_values_says_so_and_offers_a_new_key(client, lead, team, node) -> None:
    client.force_login(lead)
    key = _form_key(client)
    client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "idempotency_key": key})
    changed = {**SUBMIT, "team": team.pk, "name": "chat-13b", "idempotency_key": key}
    response = client.post(reverse("jobs:submit"), changed)
    assert response.status_code == 200
    assert "already submitted with other values" in " ".join(response.context["form"].non_field_errors())
    fresh = response.content.decode().split('name="idempotency_key" value="', 1)[1].split('"', 1)[0]
    assert fresh != key
    assert client.post(reverse("jobs:submit"), {**changed, "idempotency_key": fresh}).status_code == 302
    assert sorted(Job.objects.values_list("name", flat=True)) == ["chat-13b", "chat-7b"]


def test_a_form_without_a_key_still_submits(client, lead, team, node) -> None:
    client.force_login(lead)
    assert client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk}).status_code == 302
    assert client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk}).status_code == 302
    assert Job.objects.count() == 2


def test_a_damaged_key_is_a_form_error(client, lead, team, node) -> None:
    client.force_login(lead)
    response = client.post(reverse("jobs:submit"), {**SUBMIT, "team": team.pk, "idempotency_key": "bad\x01key"})
    assert response.status_code == 200
    assert "damaged" in " ".join(response.context["form"].non_field_errors())
    assert not Job.objects.exists()
