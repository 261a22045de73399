"""The live API against its own OpenAPI schema, with schemathesis.

A live test server (pytest-django's ``live_server``: a real WSGI server on a port, PostgreSQL in CI) serves
``/api/schema/``; schemathesis generates requests for every operation from it — valid and invalid ones,
boundary values, NUL characters — and checks each answer: never a 5xx, a status the schema documents, the
documented content type, a body that matches the documented schema. The caller is the lead of one team
(``nlp``), signed in with a token, with running, pending and finished jobs, events and allocations; another
team's jobs exist too, so ids and slugs that are not theirs answer 404.

Bounded for ``make test``: :data:`EXAMPLES` generated cases per operation plus schemathesis' coverage cases,
then a short stateful run over the links it infers (list → detail by id). The figures are in RELIABILITY.md.

The checkpoint report (``POST /api/v1/jobs/{id}/checkpoints/``) takes a job's credential, not a person's: the
lead's token gets its documented 401 there, and a second run sends the running job's own credential to its own
id, so the report's 201, 200 and 400 answers are checked against the schema too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.authtoken.models import Token

from jobs.credentials import job_token
from jobs.models import JobEvent
from tests.factories import JobFactory, MembershipFactory, ProjectFactory, QuotaFactory, TeamFactory, UserFactory
from tests.portal.fleet import fleet, pending_queue, running_job

EXAMPLES = 25
STATEFUL_STEPS = 6
STATEFUL_SCENARIOS = 10

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
)


def _config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": 20261101,  # the same cases on every run: a failure here is a bug, not bad luck
            "generation": {"mode": "all", "max-examples": EXAMPLES},
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": True, "max-steps": STATEFUL_STEPS},
            },
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
        }
    )


def _generated_schema() -> dict[str, Any]:
    """The schema as /api/schema/ serves it (the test below checks they are equal), built in-process.

    schemathesis' eager ``schema.parametrize()`` needs the schema when pytest collects this module, before any
    live server exists; its lazy ``from_fixture`` loader would wait for one, but it reads ``Node._nodeid``,
    which pytest 9 no longer has (schemathesis 4.32)."""
    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


SCHEMA = _generated_schema()
# Every operation, the job-submit path (POST /api/v1/jobs/, POST /api/v1/rightsize/) included: nothing excluded.
schema = schemathesis.openapi.from_dict(SCHEMA, config=_config())


@pytest.fixture
def world(transactional_db: None) -> dict[str, Any]:
    """The lead of ``nlp`` with a token, and data for every operation to read: a fleet node, running, pending
    and finished jobs with events and allocations, a project and a quota; plus another team's jobs."""
    team = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    lead = MembershipFactory(team=team, role="lead", user=UserFactory(username="nlp-lead")).user
    member = MembershipFactory(team=team, role="member", user=UserFactory(username="nlp-member")).user
    ProjectFactory(team=team, code="llm-pretrain")
    QuotaFactory(team=team, gpu_class="A100")
    node = fleet()
    running = running_job(team, node, name="llama-pretrain", submitted_by=member)
    pending_queue(team, 5, submitted_by=lead)
    started = timezone.now() - timedelta(hours=3)
    done = JobFactory(
        team=team,
        name="finished",
        state="completed",
        submitted_at=started,
        started_at=started,
        finished_at=started + timedelta(hours=2),
    )
    JobEvent.objects.create(job=done, type="submitted", at=done.submitted_at, actor=lead)
    JobEvent.objects.create(job=running, type="priority_changed", at=timezone.now(), actor=None)
    vision = TeamFactory(name="Vision", slug="vision", namespace="team-vision")
    JobFactory(team=vision, name="not-yours", state="pending")
    return {"token": Token.objects.create(user=lead).key, "team": team, "running": running}


@pytest.fixture
def case_log() -> Iterator[list[str]]:
    """The cases sent for one operation; fails the test loudly when schemathesis generated none (or only a
    handful): a broken schema or fixture would otherwise pass with nothing tested."""
    log: list[str] = []
    yield log
    print(f"\nschemathesis: {len(log)} cases for {log[0] if log else 'an operation'}")  # shown with pytest -s
    if len(log) < EXAMPLES // 2:
        pytest.fail(f"schemathesis generated {len(log)} cases for this operation; expected at least {EXAMPLES // 2}")


def _auth(world: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Token {world['token']}"}


@schema.parametrize()
@hypothesis.settings(deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
def test_every_operation_answers_as_documented(
    case: schemathesis.Case, live_server: Any, world: dict[str, Any], case_log: list[str]
) -> None:
    # Over a thousand requests in a minute would spend the per-user throttle budget; the live server runs in this
    # process and shares its cache, so a fresh budget per case keeps every case a real one, not a 429.
    cache.clear()
    case_log.append(case.operation.label)
    case.call_and_validate(base_url=live_server.url, headers=_auth(world))


REPORT = schema.include(path="/api/v1/jobs/{id}/checkpoints/", method="POST")


@REPORT.parametrize()
@hypothesis.settings(deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
def test_the_checkpoint_report_answers_as_documented_for_its_own_job(
    case: schemathesis.Case, live_server: Any, world: dict[str, Any], case_log: list[str]
) -> None:
    cache.clear()
    case_log.append(case.operation.label)
    job = world["running"]
    case.path_parameters = {"id": job.pk}  # the credential reports for this job only: any other id is a 403
    # A generated time is almost never between the job's submit and now, so every second case reports "now"
    # (whatever else it holds): the answers a good report gets, 201 and 200, are checked as well as the 400s.
    if len(case_log) % 2 and isinstance(case.body, dict) and "saved_at" in case.body:
        case.body = {**case.body, "saved_at": timezone.now().isoformat()}
    case.call_and_validate(base_url=live_server.url, headers={"Authorization": f"Bearer {job_token(job.pk)}"})


def test_the_served_schema_is_the_one_tested(live_server: Any, world: dict[str, Any]) -> None:
    served = requests.get(f"{live_server.url}/api/schema/?format=json", headers=_auth(world), timeout=30)
    assert served.status_code == 200
    assert served.json() == SCHEMA
    operations = [op for result in schema.get_all_operations() if (op := result.ok())]
    assert len(operations) >= 15, [op.label for op in operations]


def test_stateful_links(live_server: Any, world: dict[str, Any]) -> None:
    """Chains operations along the links schemathesis infers from the schema (a job id from a list into the
    job's detail, events and actions) and checks every answer the same way."""
    steps: list[str] = []

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            cache.clear()  # a fresh throttle budget, as above
            steps.append(case.operation.label)
            return {"base_url": live_server.url, "headers": _auth(world)}

    Machine.run(
        settings=hypothesis.settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=list(hypothesis.HealthCheck),
            derandomize=True,
        )
    )
    print(f"\nschemathesis stateful: {len(steps)} calls over {len(set(steps))} operations")  # shown with pytest -s
    assert len(steps) >= STATEFUL_SCENARIOS, steps
