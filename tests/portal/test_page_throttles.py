"""Per-user throttles on the expensive pages (portal/page_throttles.py): the submit form's live previews and
the queue, jobs, dashboards, cluster and billing pages answer 429 with Retry-After and a short message past
their rate (an htmx partial for htmx); each user has a budget of their own; parallel requests never get more."""

from __future__ import annotations

import threading

import pytest
from django.core.cache import cache
from django.test import Client, RequestFactory, override_settings

from portal import page_throttles
from portal.page_throttles import SCOPES
from tests.portal.test_rate_counter import SlowCache

pytestmark = pytest.mark.django_db

SMALL = {"preview": "3/min", "page": "2/min"}


@override_settings(PAGE_THROTTLE_RATES=SMALL)
def test_the_live_suggestion_is_throttled_per_user_with_an_htmx_message(lead, member) -> None:
    client = Client()
    client.force_login(lead)
    # The suggestion and the checkpoint proposal share the preview budget.
    codes = [client.post("/jobs/suggest/", {}, HTTP_HX_REQUEST="true").status_code for _ in range(2)]
    codes.append(client.post("/jobs/checkpoint-interval/", {}, HTTP_HX_REQUEST="true").status_code)
    assert codes == [200, 200, 200]
    refused = client.post("/jobs/suggest/", {}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert refused["HX-Reswap"] == "innerHTML"
    body = refused.content.decode()
    assert body.startswith('<p class="error" role="alert" data-testid="too-many">Too many requests')
    assert "<html" not in body  # a partial, for the spot the form fills
    other = Client()
    other.force_login(member)
    assert other.post("/jobs/suggest/", {}, HTTP_HX_REQUEST="true").status_code == 200  # a budget of their own


@override_settings(PAGE_THROTTLE_RATES=SMALL)
@pytest.mark.parametrize("path", ["/queue/", "/jobs/", "/teams/nlp/", "/cluster/", "/jobs/submit/"])
def test_expensive_pages_are_throttled_per_user(lead, path: str) -> None:
    client = Client()
    client.force_login(lead)
    assert [client.get(path).status_code for _ in range(2)] == [200, 200]
    refused = client.get(path)
    assert refused.status_code == 429 and "Retry-After" in refused
    assert "<html" in refused.content.decode() and "Too many requests" in refused.content.decode()
    assert client.get("/accounts/token/").status_code == 200  # cheap pages are not counted


@override_settings(PAGE_THROTTLE_RATES=SMALL)
def test_billing_pages_are_throttled(finance_user) -> None:
    client = Client()
    client.force_login(finance_user)
    assert [client.get("/billing/").status_code for _ in range(3)] == [200, 200, 429]


@override_settings(PAGE_THROTTLE_RATES=SMALL)
def test_anonymous_requests_go_to_sign_in_uncounted(client: Client) -> None:
    assert [client.get("/queue/").status_code for _ in range(4)] == [302] * 4


def test_every_scope_has_a_rate_and_every_name_resolves() -> None:
    from django.conf import settings
    from django.urls import reverse

    assert set(SCOPES.values()) == set(settings.PAGE_THROTTLE_RATES) == {"preview", "page"}
    assert settings.PAGE_THROTTLE_RATES == {"preview": "60/min", "page": "60/min"}
    for name in SCOPES:
        kwargs = {"slug": "nlp"} if name in ("jobs:dashboard", "billing:team") else {}
        assert reverse(name, kwargs=kwargs)


@override_settings(PAGE_THROTTLE_RATES={"preview": "10/min", "page": "10/min"})
def test_parallel_previews_of_one_user_never_exceed_the_rate(lead, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six loops of one user at once, through the middleware's count, on a cache as slow as a Redis round trip
    (a test database connection is the test's own, so threads exercise the count rather than the view)."""
    monkeypatch.setattr(page_throttles, "cache", SlowCache(cache))
    request = RequestFactory().post("/jobs/suggest/")
    request.user = lead
    refusals: list[int | None] = []
    lock = threading.Lock()

    def loop() -> None:
        for _ in range(5):
            wait = page_throttles._refused_for(request, "preview")
            with lock:
                refusals.append(wait)

    threads = [threading.Thread(target=loop) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(refusals) == 30 and refusals.count(None) == 10
