"""The API's limits: throttles per user (session or token) and per anonymous address with 429, Retry-After and
a JSON reason; the browsable API only with DEBUG; the schema and the docs behind sign-in unless
API_SCHEMA_PUBLIC; and the production defaults of all of them, read in a fresh interpreter."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle

from portal.throttles import AnonThrottle, UserThrottle
from tests.portal.test_settings import PRODUCTION_ENV, _manage

pytestmark = pytest.mark.django_db

QUEUE = "/api/v1/queue/"


@pytest.fixture
def small_rates(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rates small enough to reach in a test. DRF's throttles copy the rates when they are imported, so the
    class attribute is what to patch; the counts live in the cache, emptied before and after."""
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"user": "3/min", "anon": "2/min"})
    cache.clear()
    yield
    cache.clear()


def _token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def _assert_throttled(response) -> None:
    assert response.status_code == 429
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 60
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": f"Request was throttled. Expected available in {wait} seconds."}


def test_throttles_are_on_in_the_tests_with_the_production_rates() -> None:
    assert list(api_settings.DEFAULT_THROTTLE_CLASSES) == [AnonThrottle, UserThrottle]
    assert issubclass(AnonThrottle, AnonRateThrottle) and issubclass(UserThrottle, UserRateThrottle)
    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] == {
        "user": "600/min",
        "anon": "60/min",
        "job_report": "120/min",
    }
    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"


def test_a_token_over_its_rate_gets_429_with_retry_after_and_a_reason(small_rates, lead, member) -> None:
    client = _token_client(lead)
    assert [client.get(QUEUE).status_code for _ in range(3)] == [200] * 3
    _assert_throttled(client.get(QUEUE))
    # The budget is the user's, whichever credential they present: their browser session shares it.
    session = APIClient()
    session.force_login(lead)
    _assert_throttled(session.get(QUEUE))
    # Another user has a budget of their own.
    assert _token_client(member).get(QUEUE).status_code == 200


def test_throttles_let_requests_through_while_the_cache_is_down(
    small_rates, lead, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A Redis cache on a port where nothing listens: every count fails as it would during an outage.
    dead = RedisCache("redis://127.0.0.1:1/0", {"OPTIONS": {"socket_connect_timeout": 0.2}})
    monkeypatch.setattr(SimpleRateThrottle, "cache", dead)
    client = _token_client(lead)
    with caplog.at_level(logging.WARNING, logger="portal.throttles"):
        assert [client.get(QUEUE).status_code for _ in range(5)] == [200] * 5  # over the rate of 3, yet served
    outage = [r for r in caplog.records if "cannot reach the cache" in r.getMessage()]
    assert len(outage) == 1  # one line per outage, not one per request
    monkeypatch.setattr(SimpleRateThrottle, "cache", cache)  # the cache answers again: counting resumes
    with caplog.at_level(logging.WARNING, logger="portal.throttles"):
        statuses = [client.get(QUEUE).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert any("reach the cache again" in r.getMessage() for r in caplog.records)


def test_writes_count_against_the_same_budget(small_rates, lead) -> None:
    client = _token_client(lead)
    for _ in range(3):
        client.get(QUEUE)
    _assert_throttled(client.post("/api/v1/queue/reorder/", {"team": "nlp", "job_ids": []}, format="json"))


def test_an_anonymous_address_over_its_rate_gets_429(small_rates) -> None:
    # The schema is public with DEBUG on: the one API read open to anonymous callers in the tests.
    client = Client()
    assert [client.get("/api/schema/", REMOTE_ADDR="198.51.100.4").status_code for _ in range(2)] == [200, 200]
    _assert_throttled(client.get("/api/schema/", REMOTE_ADDR="198.51.100.4"))
    assert client.get("/api/schema/", REMOTE_ADDR="198.51.100.5").status_code == 200  # another address


def test_the_browsable_api_is_there_with_debug(lead) -> None:
    client = APIClient()
    client.force_login(lead)
    response = client.get(QUEUE, HTTP_ACCEPT="text/html")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")


# --- the schema and the docs -----------------------------------------------------------------------------------


def test_schema_and_docs_are_public_with_debug(client: Client) -> None:
    assert settings.API_SCHEMA_PUBLIC is True
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content
    assert client.get("/api/docs/?script=").status_code == 200


@override_settings(API_SCHEMA_PUBLIC=False)
def test_without_public_schema_anonymous_gets_401_json_and_the_docs_send_to_sign_in(client: Client) -> None:
    schema = client.get("/api/schema/")
    assert schema.status_code == 401
    assert schema["Content-Type"].startswith("application/json")
    assert schema.json() == {"detail": "Authentication credentials were not provided."}
    docs = client.get("/api/docs/")
    assert docs.status_code == 302 and docs["Location"] == "/accounts/login/?next=/api/docs/"
    script = client.get("/api/docs/?script=")
    assert script.status_code == 302 and script["Location"].startswith("/accounts/login/")


@override_settings(API_SCHEMA_PUBLIC=False)
def test_without_public_schema_a_signed_in_user_or_a_token_reads_both(client: Client, member) -> None:
    assert _token_client(member).get("/api/schema/").status_code == 200
    client.force_login(member)
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/docs/?script=").status_code == 200


# --- production defaults ---------------------------------------------------------------------------------------

_PRODUCTION_PROBE = """
import json
from django.conf import settings
from django.test import Client, override_settings
from rest_framework.views import APIView
cache_backend = settings.CACHES["default"]["BACKEND"]
client = Client(HTTP_HOST="microcosm.example.com")
# The throttles count in the configured Redis, which this probe has not got: memory stands in for it.
with override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}):
    api = client.get("/api/v1/queue/", secure=True, HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    schema = client.get("/api/schema/", secure=True)
    docs = client.get("/api/docs/", secure=True)
print(json.dumps({
    "renderers": [c.__name__ for c in APIView.renderer_classes],
    "rates": settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
    "throttles": settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"],
    "cache": cache_backend,
    "schema_public": settings.API_SCHEMA_PUBLIC,
    "lockout": [settings.AXES_FAILURE_LIMIT, settings.AXES_COOLOFF_TIME.total_seconds()],
    "api": [api.status_code, api["Content-Type"]],
    "schema": [schema.status_code, schema["Content-Type"]],
    "docs": [docs.status_code, docs.get("Location")],
    "csp": docs.get("Content-Security-Policy", ""),
}))
"""


@pytest.fixture(scope="module")
def production() -> dict[str, object]:
    result = _manage("shell", "-c", _PRODUCTION_PROBE, env={**PRODUCTION_ENV, "REDIS_URL": "redis://redis:6379/0"})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_renders_json_only(production: dict[str, object]) -> None:
    assert production["renderers"] == ["JSONRenderer"]
    # A browser asking for HTML gets JSON: there is no browsable API to fall back on.
    assert production["api"] == [401, "application/json"]


def test_production_keeps_the_schema_and_docs_behind_sign_in(production: dict[str, object]) -> None:
    assert production["schema_public"] is False
    assert production["schema"] == [401, "application/json"]
    assert production["docs"] == [302, "/accounts/login/?next=/api/docs/"]


def test_production_limits_and_their_shared_cache(production: dict[str, object]) -> None:
    assert production["rates"] == {"user": "600/min", "anon": "60/min", "job_report": "120/min"}
    assert production["throttles"] == ["portal.throttles.AnonThrottle", "portal.throttles.UserThrottle"]
    # Every web replica counts in the same Redis (REDIS_URL), so N replicas do not allow N times the rate.
    assert production["cache"] == "django.core.cache.backends.redis.RedisCache"
    assert production["lockout"] == [5, 900.0]
    assert "script-src 'self'" in str(production["csp"])


@pytest.mark.parametrize(
    ("variable", "junk", "message"),
    [
        ("API_THROTTLE_USER", "600/mango", "API_THROTTLE_USER='600/mango' is not a rate"),
        ("API_THROTTLE_ANON", "lots", "API_THROTTLE_ANON='lots' is not a rate"),
        ("API_THROTTLE_JOB_REPORT", "often", "API_THROTTLE_JOB_REPORT='often' is not a rate"),
        ("LOGIN_FAILURE_LIMIT", "0", "LOGIN_FAILURE_LIMIT=0 is below the minimum 1"),
        ("API_SCHEMA_PUBLIC", "maybe", "API_SCHEMA_PUBLIC='maybe' is not a boolean"),
    ],
)
def test_junk_limits_stop_start_up(variable: str, junk: str, message: str) -> None:
    result = _manage("check", env={**PRODUCTION_ENV, variable: junk})
    assert result.returncode != 0
    assert message in result.stderr
