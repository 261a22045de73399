"""The OpenAPI schema says what validation accepts: each body below is judged by the schema (JSON Schema draft 4,
as OpenAPI 3.0 reads it) and by the API, and the two verdicts agree. And the figures that count the schema's
operations (RELIABILITY.md) are the schema's own count."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from jobs.api.schema_rules import REQUEST_KEYS, RIGHTSIZE, SUBMIT
from jobs.models import Job

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


def schema_accepts(schema: dict[str, Any], component: str, body: Any) -> bool:
    document = {"$ref": f"#/components/schemas/{component}", "components": schema["components"]}
    return jsonschema.Draft4Validator(document).is_valid(body)


@pytest.mark.parametrize("component", [SUBMIT, RIGHTSIZE])
def test_a_spec_body_states_its_request_in_exactly_one_way(schema, component: str) -> None:
    body = schema["components"]["schemas"][component]
    assert body["oneOf"] == [{"required": [key], "title": f"request by {key}"} for key in REQUEST_KEYS]
    assert body["additionalProperties"] is False


# The request keys of a body (the submit adds its team); True: both the schema and the API accept it.
BODIES: list[tuple[str, dict[str, Any], bool]] = [
    ("gpus", {"gpus": 1}, True),
    ("memory", {"memory_gib": 18}, True),
    ("mig profile", {"mig_profile": "1g.10gb"}, True),
    ("model", {"model": {"params_b": 7}, "kind": "inference"}, True),
    ("model on a GPU class", {"model": {"params_b": 7}, "gpu_model": "A100"}, True),
    ("no request", {}, False),
    ("two requests", {"gpus": 1, "memory_gib": 18}, False),
    ("four requests", {"gpus": 1, "mig_profile": "1g.10gb", "memory_gib": 4, "model": {"params_b": 1}}, False),
    ("a trace-only request", {"gpu_milli": 500}, False),
    ("an unknown key", {"gpus": 1, "gpuz": 2}, False),
    ("an unknown model key", {"model": {"params_b": 7, "size": 1}}, False),
    ("an unknown GPU model", {"gpus": 1, "gpu_model": "Z100"}, False),
    ("an unknown MIG profile", {"mig_profile": "9g.999gb"}, False),
    ("no parameters", {"model": {"params_b": 0}}, False),
    ("a few parameters", {"model": {"params_b": 0.0005}}, True),
]
SUBMIT_ONLY: list[tuple[str, dict[str, Any], bool]] = [
    ("a blank name", {"gpus": 1, "name": "   "}, False),
    ("a blank image", {"gpus": 1, "image": ""}, False),
    ("an image", {"gpus": 1, "image": "ghcr.io/org/train:1"}, True),
    ("a scenario's id", {"gpus": 1, "id": "trainer-1"}, True),
    ("a blank id", {"gpus": 1, "id": " "}, False),
    ("too many variables", {"gpus": 1, "env": {f"V{i}": "x" for i in range(257)}}, False),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("label", "body", "accepted"), BODIES + SUBMIT_ONLY, ids=lambda v: v if isinstance(v, str) else ""
)
def test_the_schema_and_the_submit_agree(schema, lead, label: str, body: dict[str, Any], accepted: bool) -> None:
    submit = {**body, "team": "nlp"}
    assert schema_accepts(schema, SUBMIT, submit) is accepted, "the schema's verdict"
    client = APIClient()
    client.force_authenticate(lead)
    response = client.post("/api/v1/jobs/", submit, format="json")
    assert response.status_code == (201 if accepted else 400), response.content
    assert Job.objects.exists() is accepted


@pytest.mark.django_db
@pytest.mark.parametrize(("label", "body", "accepted"), BODIES, ids=lambda v: v if isinstance(v, str) else "")
def test_the_schema_and_the_right_sizing_agree(schema, lead, label: str, body: dict[str, Any], accepted: bool) -> None:
    assert schema_accepts(schema, RIGHTSIZE, body) is accepted, "the schema's verdict"
    client = APIClient()
    client.force_authenticate(lead)
    response = client.post("/api/v1/rightsize/", body, format="json")
    assert response.status_code == (200 if accepted else 400), response.content


@pytest.mark.parametrize(
    ("month", "valid"), [("2026-11", True), ("1999-12", False), ("2026-13", False), ("0000-00", False)]
)
def test_the_chargeback_month_pattern_is_the_reader_s(schema, month: str, valid: bool) -> None:
    from billing.errors import PeriodInvalid
    from billing.periods import parse_month

    (parameter,) = [p for p in schema["paths"]["/api/v1/chargeback/"]["get"]["parameters"] if p["name"] == "month"]
    assert bool(re.search(parameter["schema"]["pattern"], month)) is valid
    try:
        parse_month(month)
    except PeriodInvalid:
        assert not valid
    else:
        assert valid


def test_the_documents_count_the_schema_s_operations(schema) -> None:
    """RELIABILITY.md says how many operations the schema has wherever it counts them: the schema's count."""
    operations = sum(len(methods) for methods in schema["paths"].values())
    text = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    counted = [int(n) for n in re.findall(r"operations? of the OpenAPI schema \((\d+)\)", text)]
    counted += [int(n) for n in re.findall(r"(?:all|over all|every one of the) (\d+) (?:API )?operations", text)]
    assert counted, "RELIABILITY.md no longer counts the schema's operations in words this test reads"
    assert set(counted) == {operations}, f"RELIABILITY.md counts {counted}; the schema has {operations}"
