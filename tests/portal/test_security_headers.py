"""Content-Security-Policy on every response, and templates that need nothing it forbids: no inline script, no
on…= handler, no javascript: URL (behaviour lives in static/js/ and is asked for with data- attributes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from tests.factories import JobFactory, QuotaFactory
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def _policy(response) -> dict[str, str]:
    header = response.headers.get("Content-Security-Policy", "")
    return dict(part.strip().split(" ", 1) for part in header.split(";") if part.strip())


@pytest.fixture
def pages(team, lead) -> list[str]:
    QuotaFactory(team=team, gpu_class="A100", guaranteed_gpus=2, burst_gpus=4)
    job = running_job(team, fleet(), name="llama-pretrain")
    pending = JobFactory(team=team, name="waiting", submitted_by=lead, state="pending")
    return [
        "/",
        f"/teams/{team.slug}/",
        f"/teams/{team.slug}/manage/",
        "/jobs/submit/",
        f"/jobs/{job.pk}/",
        f"/jobs/{pending.pk}/",
        "/queue/",
        "/cluster/",
        "/accounts/token/",
        "/accounts/password/",
        "/api/docs/",
        "/api/docs/?script=",
        "/api/schema/",
        "/api/v1/queue/",
        "/healthz",
        "/no-such-page/",
    ]


def test_every_page_of_a_lead_carries_the_policy(client: Client, lead, pages: list[str]) -> None:
    client.force_login(lead)
    for path in pages:
        response = client.get(path)
        assert response.status_code in (200, 302, 404), (path, response.status_code)
        assert _policy(response) == POLICY, path


def test_finance_admin_and_anonymous_pages_carry_the_policy(client: Client, finance_user, superuser) -> None:
    for path in ("/accounts/login/", "/", "/admin/login/", "/api/v1/queue/"):
        assert _policy(client.get(path)) == POLICY, path
    client.force_login(finance_user)
    for path in ("/billing/", "/billing/advisor/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert _policy(response) == POLICY, path
    client.force_login(superuser)
    for path in ("/admin/", "/admin/scheduler/node/", "/admin/axes/accessattempt/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert _policy(response) == POLICY, path


def test_the_lockout_page_carries_the_policy(client: Client, lead) -> None:
    for _ in range(5):
        response = client.post("/accounts/login/", {"username": lead.username, "password": "wrong"})
    assert response.status_code == 429
    assert _policy(response) == POLICY


def test_scripts_are_never_inline() -> None:
    assert "'unsafe-inline'" not in POLICY["script-src"] and "'unsafe-eval'" not in POLICY["script-src"]


_SCRIPT = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)
_HANDLER = re.compile(r"""<[^>]*\son[a-z]+\s*=""", re.IGNORECASE)
_JS_URL = re.compile(r"""(?:href|src|action)\s*=\s*["']?\s*javascript:""", re.IGNORECASE)


@pytest.mark.parametrize(
    "template", sorted((ROOT / "templates").rglob("*.html")), ids=lambda p: str(p.relative_to(ROOT / "templates"))
)
def test_templates_ask_for_nothing_the_policy_forbids(template: Path) -> None:
    text = template.read_text()
    for attributes in _SCRIPT.findall(text):
        # A script from a file, or data the page carries (json_script: type="application/json", never run).
        assert "src=" in attributes or "application/json" in attributes, f"inline <script> in {template}"
    assert not _HANDLER.search(text), f"an on…= handler in {template}: use a data- attribute and static/js/"
    assert not _JS_URL.search(text), f"a javascript: URL in {template}"
