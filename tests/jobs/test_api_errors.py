"""Malformed API requests answer 4xx JSON, never a 500 (hardening item 5): NUL characters and text that is not
UTF-8 in query parameters, paths, headers and JSON bodies; bodies nested too deep or too large; out-of-range
dates, offsets and numbers; URLs no route matches. Each case was a 500 (or an HTML answer) once; run them on
PostgreSQL too (``DATABASE_URL``), where a NUL is a ``DataError``."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from jobs.api.parsers import MAX_DEPTH, nesting_depth, value_problems
from jobs.api.schema import CONFLICT_OPERATIONS
from jobs.models import Job
from tests.factories import JobFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

LIMIT = settings.DATA_UPLOAD_MAX_MEMORY_SIZE


@pytest.fixture
def api(lead) -> APIClient:
    """The API as the team's lead."""
    client = APIClient()
    client.force_authenticate(lead)
    return client


@pytest.fixture
def job(team, lead):
    return running_job(team, fleet(), name="llama-pretrain", submitted_by=lead)


def raw_post(client: APIClient, path: str, body: bytes | str, content_type: str = "application/json"):
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return client.generic("POST", path, data, content_type=content_type)


def assert_json(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json", response["Content-Type"]
    return response.json()


# -- NUL and undecodable text in query parameters, paths and headers ----------------------------------------


@pytest.mark.parametrize(
    "url, field",
    [
        ("/api/v1/jobs/?team=%00", "team"),
        ("/api/v1/jobs/?name=ab%00cd", "name"),
        ("/api/v1/queue/?team=nlp%00", "team"),
        ("/api/v1/queue/?name=%ED%A0%80", "name"),  # a lone surrogate, UTF-8-encoded: not UTF-8
        ("/api/v1/jobs/?submitted_after=%00", "submitted_after"),
        ("/api/v1/chargeback/?month=2026-10&team=%00", "team"),  # read straight from query_params, no filter
        ("/api/v1/teams/nlp/utilization/?window=%FF", "window"),
        ("/api/v1/jobs/?%00=1", "\\x00"),  # the parameter's name, shown escaped
    ],
)
def test_nul_or_non_utf8_in_a_query_parameter_is_a_400_naming_it(api, team, url, field) -> None:
    body = assert_json(api.get(url), 400)
    assert list(body) == [field]
    assert "NUL" in body[field][0] or "UTF-8" in body[field][0]


def test_every_bad_parameter_gets_its_own_entry(api, team) -> None:
    body = assert_json(api.get("/api/v1/jobs/?team=%00&name=ok&kind=%C0"), 400)
    assert set(body) == {"team", "kind"}


@pytest.mark.parametrize(
    "url",
    ["/api/v1/teams/%00/", "/api/v1/teams/a%00b/dashboard/", "/api/v1/jobs/%00/", "/api/v1/jobs/1%00/events/"],
)
def test_nul_in_a_path_parameter_is_a_400(api, team, job, url) -> None:
    assert "URL path" in assert_json(api.get(url), 400)["detail"]


@pytest.mark.parametrize("header", ["HTTP_AUTHORIZATION", "HTTP_COOKIE", "HTTP_X_CSRFTOKEN"])
def test_nul_in_a_header_is_a_400_before_any_lookup(team, header) -> None:
    # An Authorization token or a session key with a NUL would be looked up in PostgreSQL: a DataError.
    value = {"HTTP_AUTHORIZATION": "Token abc\x00def", "HTTP_COOKIE": "sessionid=abcdefgh\x00ij"}.get(header, "x\x00")
    response = APIClient().get("/api/v1/jobs/", **{header: value})
    assert "header" in assert_json(response, 400)["detail"]


def test_too_many_query_parameters_is_a_400_json(api, team) -> None:
    query = "&".join(f"p{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    assert "query parameters" in assert_json(api.get(f"/api/v1/jobs/?{query}"), 400)["detail"]


# -- JSON bodies -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, path",
    [
        ('{"reason": "a\\u0000b"}', "reason"),
        ('{"reason": "\\ud800"}', "reason"),  # a lone surrogate, JSON-escaped
        ('{"reason": "ok", "extra": {"tags": ["fine", "x\\u0000"]}}', "extra.tags[1]"),
        ('{"reason": 1e400}', "reason"),  # overflows a float: inf
    ],
)
def test_a_bad_string_or_number_in_a_json_body_is_a_400_naming_its_path(api, job, body, path) -> None:
    problems = assert_json(raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", body), 400)
    assert list(problems) == [path]
    job.refresh_from_db()
    assert job.state == "running"


def test_a_nul_in_a_json_key_is_named_by_the_object_holding_it(api, job) -> None:
    problems = assert_json(raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", '{"extra": {"a\\u0000": 1}}'), 400)
    assert problems == {"extra": ["a key must not contain a NUL character"]}


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/api/v1/jobs/bulk-cancel/", {"team": "nlp\x00", "job_ids": [1]}, "team"),
        ("/api/v1/queue/reorder/", {"team": "\ud800", "job_ids": [1]}, "team"),
        ("/api/v1/jobs/", {"team": "nlp", "name": "chat\x00", "gpus": 1}, "name"),
        ("/api/v1/rightsize/", {"mig_profile": "1g\x00"}, "mig_profile"),
    ],
)
def test_every_json_endpoint_refuses_nul_and_surrogates(api, team, path, body, field) -> None:
    raw = json.dumps(body)  # escapes both as \u0000 and \ud800, as a client's JSON library would
    assert field in assert_json(raw_post(api, path, raw), 400)
    assert not Job.objects.exists()


def test_a_body_nested_100000_deep_is_a_400_not_a_recursion_error(api, job) -> None:
    body = "[" * 100_000 + "]" * 100_000
    detail = assert_json(raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", body), 400)["detail"]
    assert detail == f"body nested deeper than {MAX_DEPTH} levels"


def test_nesting_is_counted_outside_strings_only(api, job) -> None:
    at_limit = '{"reason": "[[[[{{{{", "x": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    assert nesting_depth(at_limit, stop_above=MAX_DEPTH) == MAX_DEPTH
    assert raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", at_limit).status_code == 200
    assert nesting_depth('"\\"[[" [[]]', stop_above=MAX_DEPTH) == 2


def test_value_problems_walks_keys_lists_and_objects() -> None:
    assert value_problems({"a": [{"b": "\x00"}], "c": "fine", "d": float("nan")}) == {
        "a[0].b": ["must not contain a NUL character"],
        "d": ["number too large"],
    }
    assert value_problems("\ud800") == {"non_field_errors": ["must be valid Unicode text (it holds a lone surrogate)"]}


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_the_limit_is_a_413_json(api, job, content_type) -> None:
    body = b'{"reason": "' + b"x" * LIMIT + b'"}' if content_type == "application/json" else b"reason=" + b"x" * LIMIT
    response = raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", body, content_type)
    assert assert_json(response, 413) == {"detail": f"request body larger than {LIMIT} bytes"}
    job.refresh_from_db()
    assert job.state == "running"


def test_a_body_at_the_limit_is_read(api, job) -> None:
    head, tail = b'{"reason": "', b'"}'
    body = head + b"x" * (LIMIT - len(head) - len(tail)) + tail
    assert len(body) == LIMIT
    # Read and judged by the serializer (a reason is at most 500 characters), not refused for its size.
    assert "reason" in assert_json(raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", body), 400)


def test_a_content_length_that_is_not_a_number_is_a_400(api, job) -> None:
    response = api.generic("POST", f"/api/v1/jobs/{job.pk}/cancel/", b"{}", content_type="application/json")
    assert response.status_code == 200
    response = api.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json", CONTENT_LENGTH="12abc")
    assert "Content-Length" in assert_json(response, 400)["detail"]


def test_not_utf8_json_is_a_400(api, job) -> None:
    assert (
        "UTF-8"
        in assert_json(raw_post(api, f"/api/v1/jobs/{job.pk}/cancel/", b'{"reason": "\xed\xa0\x80"}'), 400)["detail"]
    )


# -- dates, offsets, months and numbers out of range ----------------------------------------------------------


@pytest.mark.parametrize(
    "value, words",
    [
        ("2026-01-01T00:00:00+17:00", "+17:00 does not exist"),  # PostgreSQL: time zone displacement out of range
        ("2026-01-01T00:00:00-13:30", "-13:30 does not exist"),
        ("9999-12-31T23:00:00-02:00", "out of range"),  # year 10000 in UTC
        ("0001-01-01T00:30:00+01:00", "out of range"),  # year 0 in UTC
        ("2026-01-01T00:00:00+24:00", "valid date/time"),
    ],
)
@pytest.mark.parametrize("field", ["submitted_after", "submitted_before"])
def test_an_offset_or_date_out_of_range_is_a_400_for_that_field(api, job, field, value, words) -> None:
    body = assert_json(api.get("/api/v1/jobs/", {field: value}), 400)
    assert list(body) == [field] and words in body[field][0]


@pytest.mark.parametrize(
    "zone, value", [("Asia/Tokyo", "0001-01-01T00:00:00"), ("America/Los_Angeles", "9999-12-31T23:00:00")]
)
def test_a_naive_date_time_read_in_the_readers_zone_can_be_out_of_range_too(api, job, zone, value) -> None:
    api.cookies["tz"] = zone.replace("/", "%2F")
    body = assert_json(api.get("/api/v1/jobs/", {"submitted_after": value}), 400)
    assert "out of range" in body["submitted_after"][0]


@pytest.mark.parametrize("value", ["2026-01-01T00:00:00+14:00", "2026-01-01T00:00:00-12:00", "2000-01-01T00:00:00Z"])
def test_real_offsets_filter_in_utc(api, job, value) -> None:
    assert assert_json(api.get("/api/v1/jobs/", {"submitted_after": value}), 200)["count"] == 1


def test_a_month_whose_end_is_in_year_10000_is_a_400(api, lead, team) -> None:
    body = assert_json(api.get("/api/v1/chargeback/", {"month": "9999-12"}), 400)
    assert "no closed hour yet" in body["month"][0]


def test_chargeback_errors_are_json_even_when_csv_was_asked_for(api, lead, team) -> None:
    body = assert_json(api.get("/api/v1/chargeback/", {"month": "9999-12", "format": "csv"}), 400)
    assert "month" in body
    assert assert_json(api.get("/api/v1/chargeback/", {"format": "xls"}), 404)


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/jobs/99999999999999999999999/",
        "/api/v1/jobs/99999999999999999999999/events/",
        "/api/v1/jobs/" + "9" * 5000 + "/",
        "/api/v1/jobs/1e308/",
        "/api/v1/jobs/-1.5/",  # no route matches a dot: Django's own 404, turned into JSON
        "/api/v1/jobs/?page=" + "9" * 400,
        "/api/v1/jobs/?page=1e308",
        "/api/v1/queue/?page=nan",
        "/api/v1/nowhere/",
    ],
)
def test_huge_or_odd_ids_and_pages_are_a_404_json(api, job, url) -> None:
    assert "detail" in assert_json(api.get(url), 404)


def test_a_huge_id_in_an_action_is_a_404(api, job) -> None:
    assert_json(api.post("/api/v1/jobs/99999999999999999999999/cancel/", {}, format="json"), 404)


@pytest.mark.parametrize("ids", [[10**30], [2**63], [10**400]])
def test_bulk_ids_beyond_the_id_column_are_unknown_jobs(api, job, ids) -> None:
    # SQLite cannot bind an integer beyond 64 bits (OverflowError); such an id names no job anywhere.
    body = assert_json(api.post("/api/v1/jobs/bulk-cancel/", {"team": "nlp", "job_ids": ids}, format="json"), 400)
    assert "not jobs of team nlp" in body["job_ids"][0]


def test_other_teams_jobs_stay_404(api, job) -> None:
    theirs = JobFactory(name="theirs")
    assert_json(api.get(f"/api/v1/jobs/{theirs.pk}/"), 404)


# -- the schema says what the API answers ---------------------------------------------------------------------


@pytest.fixture
def schema(api) -> dict:
    return api.get("/api/schema/", {"format": "json"}).json()


def test_who_did_it_is_nullable_in_the_schema(schema) -> None:
    components = schema["components"]["schemas"]
    assert components["Job"]["properties"]["submitted_by"]["nullable"] is True
    assert components["JobEvent"]["properties"]["actor"]["nullable"] is True


def test_every_operation_documents_its_error_statuses(schema) -> None:
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"400", "401", "403", "404", "406", "413", "429"} <= codes, (method, path, codes)
            assert ("415" in codes) == ("requestBody" in operation), (method, path)
            assert ("409" in codes) == ((method.upper(), path) in CONFLICT_OPERATIONS), (method, path)
            bad = operation["responses"]["400"]["content"]["application/json"]["schema"]
            assert bad == {
                "anyOf": [{"$ref": "#/components/schemas/FieldErrors"}, {"$ref": "#/components/schemas/Error"}]
            }


def test_every_conflict_operation_is_in_the_schema(schema) -> None:
    present = {(method.upper(), path) for path, operations in schema["paths"].items() for method in operations}
    assert present >= CONFLICT_OPERATIONS


def test_the_chargeback_documents_its_csv(schema) -> None:
    ok = schema["paths"]["/api/v1/chargeback/"]["get"]["responses"]["200"]["content"]
    assert set(ok) == {"application/json", "text/csv"}
