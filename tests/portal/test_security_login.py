"""Sign-in lockout (django-axes, portal/lockout.py): LOGIN_FAILURE_LIMIT wrong passwords for one username from
one address lock that pair for LOGIN_LOCKOUT_MINUTES, LOGIN_ACCOUNT_FAILURE_LIMIT from any addresses lock the
account, LOGIN_ADDRESS_FAILURE_LIMIT from one address at any usernames lock the address; the page says so;
below those counts other users and addresses are unaffected; the owner unlocks from a signed-in session, a
platform admin in the admin or with axes' commands; the API never takes a password, so it is no way round."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.management import call_command
from django.http import HttpResponse
from django.test import Client, RequestFactory, override_settings
from django.utils import timezone
from rest_framework.settings import api_settings

from portal.views import client_address

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
RIGHT = "pw-for-tests"
LOCKED = "Too many failed sign-ins; try again in 15 minutes or ask a platform admin to unlock your account."


def _sign_in(client: Client, username: str, password: str, address: str = "127.0.0.1") -> HttpResponse:
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def _fail(client: Client, username: str, times: int, address: str = "127.0.0.1") -> list[int]:
    return [_sign_in(client, username, "wrong", address).status_code for _ in range(times)]


def test_the_limits_are_on_with_their_defaults() -> None:
    assert settings.LOGIN_FAILURE_LIMIT == settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"], "username", "ip_address"]
    assert (settings.LOGIN_ACCOUNT_FAILURE_LIMIT, settings.LOGIN_ADDRESS_FAILURE_LIMIT) == (20, 40)
    assert settings.AXES_HANDLER == "portal.lockout.LockoutHandler"
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"
    assert settings.MIDDLEWARE[-1] == "axes.middleware.AxesMiddleware"


def test_five_failures_lock_and_the_right_password_is_then_refused_with_the_reason(client: Client, lead) -> None:
    # Four failures are ordinary mistakes: the form says the password is wrong and the next try is counted.
    assert _fail(client, lead.username, 4) == [200] * 4
    fifth = _sign_in(client, lead.username, "wrong")
    assert fifth.status_code == 429
    assert LOCKED in fifth.content.decode()
    # The sixth try, with the right password, is refused too, with the same words, and no session is made.
    sixth = _sign_in(client, lead.username, RIGHT)
    assert sixth.status_code == 429
    body = sixth.content.decode()
    assert LOCKED in body
    assert 'name="username"' in body  # the sign-in page itself, not a bare error text
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == 302  # still signed out


def test_six_wrong_passwords_lock_the_account(client: Client, lead) -> None:
    assert _fail(client, lead.username, 6) == [200] * 4 + [429] * 2
    assert _sign_in(client, lead.username, RIGHT).status_code == 429


def test_the_lock_is_per_user_and_address(client: Client, lead, member) -> None:
    _fail(client, lead.username, 5)
    assert _sign_in(client, lead.username, RIGHT).status_code == 429
    # Another user from the same address signs in …
    other = Client()
    assert _sign_in(other, member.username, RIGHT).status_code == 302
    # … and so does the locked user from another address (a guesser elsewhere cannot lock the owner out).
    elsewhere = Client()
    assert _sign_in(elsewhere, lead.username, RIGHT, address="10.1.2.3").status_code == 302


def test_the_lock_lifts_after_the_lockout_minutes(client: Client, lead) -> None:
    _fail(client, lead.username, 5)
    assert _sign_in(client, lead.username, RIGHT).status_code == 429
    # Each refused try restarts the cool-off (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT); age it past 15 min.
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert _sign_in(client, lead.username, RIGHT).status_code == 302


def test_a_success_before_the_limit_starts_the_count_again(client: Client, lead) -> None:
    _fail(client, lead.username, 4)
    assert _sign_in(client, lead.username, RIGHT).status_code == 302
    client.post("/accounts/logout/")
    assert _fail(client, lead.username, 4) == [200] * 4  # not locked: the success reset the count


def test_a_platform_admin_unlocks_in_the_admin(client: Client, lead, platform_admin: AbstractBaseUser) -> None:
    _fail(client, lead.username, 5)
    admin = Client()
    admin.force_login(platform_admin)
    listing = admin.get("/admin/axes/accessattempt/?locked_out=yes")
    assert listing.status_code == 200
    assert lead.username in listing.content.decode() and "Locked Out" in listing.content.decode()
    attempt = AccessAttempt.objects.get(username=lead.username)
    response = admin.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not AccessAttempt.objects.filter(username=lead.username).exists()
    assert _sign_in(client, lead.username, RIGHT).status_code == 302


def test_the_reset_command_unlocks_too(client: Client, lead) -> None:
    _fail(client, lead.username, 5)
    call_command("axes_reset_username", lead.username, verbosity=0)
    assert _sign_in(client, lead.username, RIGHT).status_code == 302


def test_the_admin_sign_in_is_locked_by_the_same_count(client: Client, superuser) -> None:
    _fail(client, superuser.username, 5)
    response = client.post(
        "/admin/login/?next=/admin/", {"username": superuser.username, "password": RIGHT, "next": "/admin/"}
    )
    assert response.status_code == 429
    assert LOCKED in response.content.decode()
    assert client.get("/admin/").status_code == 302


def test_the_api_takes_no_password(client: Client, lead) -> None:
    """No API authentication reads a password (tokens and sessions only; a token is made on a page that needs
    a signed-in session), so the API is no oracle that would get round the lockout."""
    names = {cls.__name__ for cls in api_settings.DEFAULT_AUTHENTICATION_CLASSES}
    assert names == {"LastUsedTokenAuthentication", "SessionAuthentication"}
    basic = "Basic " + base64.b64encode(f"{lead.username}:{RIGHT}".encode()).decode()
    response = client.get("/api/v1/queue/", HTTP_AUTHORIZATION=basic)
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}
    assert client.get("/accounts/token/").status_code == 302  # the token page signs in first
    assert client.post("/accounts/token/").status_code == 302
    assert not AccessAttempt.objects.exists()  # and nothing there was a sign-in attempt


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "", "10.0.0.9"),
        (0, "6.6.6.6", "10.0.0.9"),  # without a trusted proxy the header is the caller's own words
        (1, "203.0.113.7", "203.0.113.7"),
        (1, "6.6.6.6, 203.0.113.7", "203.0.113.7"),  # a forged entry on the left is ignored
        (2, "6.6.6.6, 203.0.113.7, 10.0.0.2", "203.0.113.7"),
    ],
)
def test_the_address_counted_is_the_one_the_trusted_proxy_saw(proxies: int, forwarded: str, expected: str) -> None:
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR=forwarded)
    with override_settings(TRUSTED_PROXY_COUNT=proxies):
        assert client_address(request) == expected


# --- the wider counts: one account from many addresses, one address at many accounts ------------------------


def test_guesses_at_one_account_from_many_addresses_lock_it_everywhere(client: Client, lead, member) -> None:
    """The audit's 160 guesses from rotating addresses met no lock; now the account-wide count locks at 20,
    each address staying under the pair's 5."""
    statuses = [
        _sign_in(client, lead.username, "wrong", address=f"10.9.{n // 4}.{n % 4}").status_code for n in range(20)
    ]
    assert statuses == [200] * 19 + [429]
    # The owner is refused from a fresh address too, with the right password …
    assert _sign_in(Client(), lead.username, RIGHT, address="192.0.2.77").status_code == 429
    # … while other accounts sign in from those same addresses.
    assert _sign_in(Client(), member.username, RIGHT, address="10.9.0.0").status_code == 302


def test_guesses_at_many_accounts_from_one_address_lock_the_address(client: Client, lead, member) -> None:
    """The audit's 200 sprayed guesses from one address met no lock; now the address-wide count locks at 40,
    each username staying under the pair's 5."""
    statuses = [_sign_in(client, f"user{n}", "Winter2025!", address="198.51.100.9").status_code for n in range(40)]
    assert statuses == [200] * 39 + [429]
    assert _sign_in(Client(), lead.username, RIGHT, address="198.51.100.9").status_code == 429
    assert _sign_in(Client(), lead.username, RIGHT, address="198.51.100.10").status_code == 302


def test_a_success_forgets_only_its_own_accounts_failures(client: Client, lead, member) -> None:
    """A sprayer's one good password must not wipe the address-wide count of the accounts it guessed at."""
    for n in range(39):
        _sign_in(client, f"user{n}", "wrong", address="198.51.100.9")
    assert _sign_in(Client(), member.username, RIGHT, address="198.51.100.9").status_code == 302
    assert _sign_in(client, "user99", "wrong", address="198.51.100.9").status_code == 429


@pytest.mark.django_db(transaction=True)  # the threads' own connections write the attempts: commit for real
def test_concurrent_guesses_from_many_addresses_are_all_counted(lead) -> None:
    """Parallel clients (threads against a live server would do the same through the same handler): axes
    counts each failure with an UPDATE … F() + 1 on a row it locks, so no failure is lost; the lock holds."""
    import threading

    from django.db import connection

    if connection.vendor == "sqlite":
        pytest.skip("SQLite in the test run has one connection: parallel writers need PostgreSQL (DATABASE_URL)")
    results: list[int] = []

    def guess(n: int) -> None:
        try:
            results.append(_sign_in(Client(), lead.username, "wrong", address=f"10.7.0.{n}").status_code)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert (
        sum(AccessAttempt.objects.filter(username=lead.username).values_list("failures_since_start", flat=True)) == 30
    )
    assert _sign_in(Client(), lead.username, RIGHT, address="192.0.2.1").status_code == 429


# --- unlocking: the owner, signed in elsewhere; an admin ------------------------------------------------------


def _lock_account(username: str) -> None:
    for n in range(20):
        _sign_in(Client(), username, "wrong", address=f"10.8.{n // 4}.{n % 4}")


def test_the_owner_sees_the_failures_and_unlocks_from_a_signed_in_session(lead) -> None:
    owner = Client()
    owner.force_login(lead)  # their laptop's session, made before the lock
    _lock_account(lead.username)
    assert _sign_in(Client(), lead.username, RIGHT, address="192.0.2.5").status_code == 429
    page = owner.get("/accounts/sign-ins/")
    assert page.status_code == 200
    body = page.content.decode()
    # 21: the refused try with the right password counts too (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT).
    assert '<td data-testid="failures">21</td>' in body and '<td data-testid="locked">yes</td>' in body
    assert owner.post("/accounts/sign-ins/").status_code == 302
    assert _sign_in(Client(), lead.username, RIGHT, address="192.0.2.5").status_code == 302
    assert 'data-testid="no-failures"' in owner.get("/accounts/sign-ins/").content.decode()


def test_the_owner_unlocks_only_their_own_account(lead, member) -> None:
    _lock_account(lead.username)
    other = Client()
    other.force_login(member)
    assert 'data-testid="no-failures"' in other.get("/accounts/sign-ins/").content.decode()  # sees none of lead's
    other.post("/accounts/sign-ins/", {"username": lead.username})  # a posted name is ignored
    assert _sign_in(Client(), lead.username, RIGHT, address="192.0.2.5").status_code == 429
    assert Client().post("/accounts/sign-ins/").status_code == 302  # anonymous: sent to sign in
    assert AccessAttempt.objects.filter(username=lead.username).count() == 21  # 20 guesses, one refused try


def test_an_admin_unlocks_an_account_or_an_address_with_axes_commands(lead) -> None:
    _lock_account(lead.username)
    call_command("axes_reset_username", lead.username, verbosity=0)
    assert _sign_in(Client(), lead.username, RIGHT, address="192.0.2.5").status_code == 302
    for n in range(40):
        _sign_in(Client(), f"user{n}", "wrong", address="198.51.100.9")
    call_command("axes_reset_ip", "198.51.100.9", verbosity=0)
    assert _sign_in(Client(), "user0", "wrong", address="198.51.100.9").status_code == 200
