"""The API token page: the key is shown once, in the answer that made it; afterwards its prefix, when it was made
and last used; regenerate and revoke act on the signed-in user's own token only; the last use is recorded on
authentication, at most once a minute."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.dateformat import format as dateformat
from pytest_django.asserts import assertContains, assertNotContains
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from portal.api_tokens import LAST_USED_RESOLUTION, PREFIX_CHARS, api_token_touch
from portal.models import ApiTokenUse

pytestmark = pytest.mark.django_db


def test_the_key_is_shown_once_then_only_its_prefix_and_dates(client: Client, lead) -> None:
    client.force_login(lead)
    assertContains(client.get("/accounts/token/"), "You have no token yet.")

    made = client.post("/accounts/token/")

    token = Token.objects.get(user=lead)
    assertContains(made, token.key)
    assertContains(made, "shown only this once")
    assert "no-store" in made["Cache-Control"]
    later = client.get("/accounts/token/")
    assertNotContains(later, token.key)
    assertContains(later, f"{token.key[:PREFIX_CHARS]}…")
    assertContains(later, "Last used</th><td>never")
    assertContains(later, f"{timezone.localtime(token.created):%Y}")


def test_regenerate_replaces_the_key_and_the_old_one_stops_working(client: Client, lead) -> None:
    client.force_login(lead)
    client.post("/accounts/token/")
    old = Token.objects.get(user=lead).key
    client.post("/accounts/token/")
    new = Token.objects.get(user=lead).key
    assert new != old
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {old}")
    assert api.get("/api/v1/queue/").status_code == 401
    api.credentials(HTTP_AUTHORIZATION=f"Token {new}")
    assert api.get("/api/v1/queue/").status_code == 200


def test_revoke_deletes_my_token_and_it_stops_working(client: Client, lead) -> None:
    token = Token.objects.create(user=lead)
    client.force_login(lead)

    response = client.post("/accounts/token/revoke/", follow=True)

    assertContains(response, "Token revoked")
    assertContains(response, "You have no token yet.")
    assert not Token.objects.filter(user=lead).exists()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert api.get("/api/v1/queue/").status_code == 401


def test_another_user_cannot_revoke_or_see_my_token(client: Client, lead, member) -> None:
    mine = Token.objects.create(user=lead)
    client.force_login(member)

    assertNotContains(client.get("/accounts/token/"), mine.key[:PREFIX_CHARS])
    response = client.post("/accounts/token/revoke/", {"user": lead.pk, "key": mine.key}, follow=True)

    assertContains(response, "You had no token to revoke.")
    assert Token.objects.filter(user=lead, key=mine.key).exists()


def test_revoke_takes_post_only_and_a_signed_in_user(client: Client, lead) -> None:
    Token.objects.create(user=lead)
    assert client.post("/accounts/token/revoke/").status_code == 302  # to sign in
    client.force_login(lead)
    assert client.get("/accounts/token/revoke/").status_code == 405
    assert Token.objects.filter(user=lead).exists()


def test_authentication_records_the_last_use_at_most_once_a_minute(client: Client, lead) -> None:
    token = Token.objects.create(user=lead)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    assert api.get("/api/v1/queue/").status_code == 200
    first = ApiTokenUse.objects.get(token=token).last_used_at
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/v1/queue/").status_code == 200
    assert ApiTokenUse.objects.get(token=token).last_used_at == first
    writes = [
        q["sql"] for q in queries.captured_queries if "portal_apitokenuse" in q["sql"] and "SELECT" not in q["sql"]
    ]
    assert writes == []

    client.force_login(lead)
    assertContains(
        client.get("/accounts/token/"), f"Last used</th><td>{dateformat(timezone.localtime(first), 'j M Y H:i')}"
    )


def test_touch_writes_again_once_the_minute_has_passed(lead) -> None:
    token = Token.objects.create(user=lead)
    start = timezone.now()
    api_token_touch(token=token, now=start)
    api_token_touch(token=token, now=start + LAST_USED_RESOLUTION - timedelta(seconds=1))
    assert ApiTokenUse.objects.get(token=token).last_used_at == start
    api_token_touch(token=token, now=start + LAST_USED_RESOLUTION)
    assert ApiTokenUse.objects.get(token=token).last_used_at == start + LAST_USED_RESOLUTION


def test_a_session_request_records_no_token_use(client: Client, lead) -> None:
    Token.objects.create(user=lead)
    client.force_login(lead)
    assert client.get("/api/v1/queue/").status_code == 200
    assert not ApiTokenUse.objects.exists()
