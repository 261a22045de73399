"""``portal.request_guard``: malformed requests are refused at the door, as JSON under /api/ and as a page
elsewhere, before sessions, authentication or any query read them (hardening item 5)."""

from __future__ import annotations

import pytest
import requests
from django.conf import settings
from django.test import RequestFactory

from portal.request_guard import (
    NOT_UTF8_MESSAGE,
    NUL_MESSAGE,
    Refusal,
    check_body_size,
    check_path_and_headers,
    check_query,
    printable,
    refusal_response,
)
from tests.portal.fleet import fleet, running_job

LIMIT = settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def refusal_of(check, *args) -> Refusal:  # type: ignore[no-untyped-def]
    with pytest.raises(Refusal) as caught:
        check(*args)
    return caught.value


# -- the checks themselves ---------------------------------------------------------------------------------


@pytest.mark.parametrize("query", [b"", b"team=nlp&name=chat+7b", b"name=%C3%A9t%C3%A9", b"a&&b=&=c", b"q=%2500"])
def test_good_query_strings_pass(query) -> None:
    check_query(query)


def test_a_nul_or_non_utf8_value_is_named_with_every_problem_once() -> None:
    refusal = refusal_of(check_query, b"team=%00&team=a%00&name=%ED%A0%80%00&kind=ok")
    assert refusal.status == 400
    assert refusal.fields == {"team": [NUL_MESSAGE], "name": [NOT_UTF8_MESSAGE, NUL_MESSAGE]}


def test_a_bad_parameter_name_is_shown_escaped() -> None:
    refusal = refusal_of(check_query, b"te%00am=1")
    assert refusal.fields == {"te\\x00am": [f"the parameter name {NUL_MESSAGE}"]}


def test_more_parameters_than_django_reads_is_refused() -> None:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    check_query(b"&".join([b"a=1"] * limit))
    assert refusal_of(check_query, b"&".join([b"a=1"] * (limit + 1))).detail == f"more than {limit} query parameters"


@pytest.mark.parametrize("length", ["", "0", "17", str(LIMIT)])
def test_a_body_up_to_the_limit_passes(length) -> None:
    check_body_size({"CONTENT_LENGTH": length})


@pytest.mark.parametrize(("length", "status"), [(str(LIMIT + 1), 413), ("9" * 5000, 413), ("-1", 400), ("1e3", 400)])
def test_a_body_over_the_limit_or_an_odd_length_is_refused(length, status) -> None:
    assert refusal_of(check_body_size, {"CONTENT_LENGTH": length}).status == status


def test_nul_in_the_path_or_a_header_is_refused() -> None:
    assert "URL path" in refusal_of(check_path_and_headers, "/teams/a\x00/", {}).detail
    refusal = refusal_of(check_path_and_headers, "/", {"HTTP_X_FORWARDED_FOR": "1.2.3.4\x00"})
    assert refusal.detail == f"the X-Forwarded-For header {NUL_MESSAGE}"
    check_path_and_headers("/queue/", {"HTTP_COOKIE": "tz=Europe%2FParis", "wsgi.input": object()})


def test_printable_cuts_and_escapes() -> None:
    assert printable("a\x00\x1fb") == "a\\x00\\x1fb"
    assert printable("x" * 500) == "x" * 80 + "…"


def test_the_guard_sits_before_sessions_and_authentication() -> None:
    order = settings.MIDDLEWARE
    guard = order.index("portal.request_guard.RequestGuardMiddleware")
    assert guard < order.index("django.contrib.sessions.middleware.SessionMiddleware")
    assert guard < order.index("django.middleware.csrf.CsrfViewMiddleware")


# -- pages -------------------------------------------------------------------------------------------------


@pytest.fixture
def signed_in(client, lead):
    client.force_login(lead)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/queue/?team=%00",
        "/queue/?name=%ED%A0%80",
        "/queue/?name=ab%00",
        "/billing/?month=%00",
        "/teams/a%00/",
        "/jobs/submit/?team=%00",
    ],
)
def test_pages_answer_a_400_page_saying_why(signed_in, url) -> None:
    response = signed_in.get(url)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Bad request" in page and ("NUL" in page or "UTF-8" in page)


@pytest.mark.django_db
def test_a_session_cookie_with_a_nul_never_reaches_the_session_table(client) -> None:
    response = client.get("/queue/", HTTP_COOKIE="sessionid=abcdefgh\x00ijkl")
    assert response.status_code == 400 and "Cookie header" in response.content.decode()


@pytest.mark.django_db
def test_an_oversized_form_is_a_413_page(signed_in) -> None:
    response = signed_in.post("/jobs/submit/", {"name": "x" * (LIMIT + 1)})
    assert response.status_code == 413
    assert "Request too large" in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/jobs/99999999999999999999999/", 404),
        ("/jobs/" + "9" * 5000 + "/", 404),
        ("/queue/?page=" + "9" * 400, 200),  # the last page, as Django's paginator does for any number too big
        ("/queue/?page=1e308", 200),
        ("/queue/?page=-1", 200),
        ("/queue/?priority=zzz&kind=1e400&mine=" + "9" * 400, 200),  # the filter form says what is wrong
        ("/teams/nlp/?window=" + "9" * 5000, 200),  # an unknown window falls back to the default
    ],
)
def test_huge_or_odd_values_on_pages_are_never_a_500(signed_in, team, url, status) -> None:
    running_job(team, fleet(), name="llama-pretrain")
    assert signed_in.get(url).status_code == status


@pytest.mark.django_db
def test_an_api_url_no_route_matches_is_json(client) -> None:
    response = client.get("/api/v1/jobs/1.5/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}


def test_the_refusal_page_names_each_field() -> None:
    request = RequestFactory().get("/queue/")
    response = refusal_response(request, Refusal(400, fields={"team": [NUL_MESSAGE]}))
    assert response.status_code == 400 and f"team: {NUL_MESSAGE}" in response.content.decode()


def test_a_real_over_limit_body_on_a_live_server_is_a_413_json(live_server) -> None:
    """Through a real WSGI server and socket, not the test client: the answer comes from the Content-Length
    alone, before the body is read."""
    body = b'{"reason": "' + b"x" * LIMIT + b'"}'
    response = requests.post(
        f"{live_server.url}/api/v1/jobs/1/cancel/",
        data=body,
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 413
    assert response.json() == {"detail": f"request body larger than {LIMIT} bytes"}
