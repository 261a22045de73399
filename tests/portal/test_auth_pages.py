"""Sign-in, sign-out, password change and the home page, seen by each persona."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import JobFactory, QuotaFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_login_page_renders(client: Client) -> None:
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b"Sign in" in response.content


def test_anonymous_home_redirects_to_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/")


def test_login_with_wrong_password_says_so(client: Client, lead) -> None:
    response = client.post("/accounts/login/", {"username": lead.username, "password": "nope"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_login_logout_round_trip(client: Client, lead) -> None:
    response = client.post("/accounts/login/", {"username": lead.username, "password": "pw-for-tests"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/", follow=True).status_code == 200  # a lead of one team lands on its dashboard
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert client.get("/").status_code == 302


def test_logout_needs_post(client: Client, lead) -> None:
    client.force_login(lead)
    assert client.get("/accounts/logout/").status_code == 405


def test_password_change(client: Client, member) -> None:
    client.force_login(member)
    assert client.get("/accounts/password/").status_code == 200
    response = client.post(
        "/accounts/password/",
        {"old_password": "pw-for-tests", "new_password1": "a-Longer-pass-123", "new_password2": "a-Longer-pass-123"},
    )
    assert response.status_code == 302
    member.refresh_from_db()
    assert member.check_password("a-Longer-pass-123")


def test_password_change_shows_field_errors(client: Client, member) -> None:
    client.force_login(member)
    response = client.post("/accounts/password/", {"old_password": "wrong", "new_password1": "x", "new_password2": "y"})
    assert response.status_code == 200
    assert b"Your old password was entered incorrectly" in response.content
    member.refresh_from_db()
    assert member.check_password("pw-for-tests")


def test_home_shows_own_team_quotas_and_jobs_but_not_other_teams(client: Client, team, member, outsider) -> None:
    QuotaFactory(team=team, gpu_class="H100", guaranteed_gpus=8, burst_gpus=16)
    JobFactory(team=team, name="llama-finetune")
    other = outsider.memberships.get().team
    QuotaFactory(team=other, gpu_class="A100", guaranteed_gpus=3, burst_gpus=5)
    JobFactory(team=other, name="secret-vision-job")
    client.force_login(member)
    body = client.get("/", follow=True).content.decode()
    assert "Language Models" in body and "team-nlp" in body
    assert "llama-finetune" in body
    assert "H100" in body
    assert "Vision" not in body
    assert "secret-vision-job" not in body


def test_platform_admin_sees_every_team(client: Client, platform_admin, team) -> None:
    TeamFactory(name="Speech")
    client.force_login(platform_admin)
    body = client.get("/").content.decode()
    assert "Language Models" in body and "Speech" in body


def test_user_without_team_gets_advice(client: Client) -> None:
    client.force_login(UserFactory(username="newcomer"))  # finance without a team lands on billing instead
    assert b"You are not a member of any team yet" in client.get("/").content


def test_admin_link_only_for_staff(client: Client, member, superuser) -> None:
    client.force_login(member)
    assert b"/admin/" not in client.get("/").content
    assert client.get("/admin/").status_code == 302
    client.force_login(superuser)
    assert b"/admin/" in client.get("/").content
    assert client.get("/admin/").status_code == 200


def test_healthz(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_reports_a_broken_database_without_leaking_it(client: Client, monkeypatch) -> None:
    from django.db import connection

    def broken_cursor(*args: object, **kwargs: object) -> None:
        raise RuntimeError("password authentication failed for user secret_admin")

    monkeypatch.setattr(connection, "cursor", broken_cursor)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "error", "detail": "database unreachable"}
    assert b"secret_admin" not in response.content
