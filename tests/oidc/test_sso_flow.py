"""Single sign-on end to end against a real OpenID Connect provider on loopback (tests/oidc/provider.mjs): the
portal's redirect, the provider's login form, the code exchange, the ID token's checks, and the teams and roles
the groups give, recomputed at every sign-in (teams/sso.py, docs/security.md)."""

from __future__ import annotations

import pytest
from auditlog.models import LogEntry
from axes.models import AccessAttempt
from django.contrib.auth.models import Group, User
from django.test import Client

from portal.models import SsoIdentity
from teams.models import Membership, SsoGroup, SsoOrgRole
from teams.roles import FINANCE, PLATFORM_ADMIN
from tests.audit.helpers import last_entry, who
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.oidc.conftest import Provider, provider_sign_in

pytestmark = pytest.mark.django_db

LEAD_GROUPS = ["nlp-leads", "all-staff"]


@pytest.fixture
def mapped(team):
    """Language Models: leads from nlp-leads, members from nlp; finance from finance-team (as teams apply
    writes them from the org file's sso_groups)."""
    SsoGroup.objects.create(group="nlp-leads", team=team, role="lead")
    SsoGroup.objects.create(group="nlp", team=team, role="member")
    SsoGroup.objects.create(group="finance-team", role=FINANCE)
    SsoGroup.objects.create(group="platform", role=PLATFORM_ADMIN)
    return team


def _account(groups: list[str], **extra: object) -> dict[str, object]:
    return {"password": "idp-pass", "email": "lee@example.com", "groups": groups, **extra}


def test_a_lead_signs_in_and_lands_on_their_team_as_lead(sso_settings: Provider, mapped) -> None:
    sso_settings.accounts({"lee": _account(LEAD_GROUPS)})
    client = Client()

    response = provider_sign_in(client, sso_settings.issuer, "lee", "idp-pass")

    assert response.status_code == 302 and response["Location"] == "/"
    landing = client.get("/", follow=True)
    assert landing.redirect_chain[-1][0] == f"/teams/{mapped.slug}/"  # one team: its dashboard
    user = User.objects.get(username="lee")
    membership = Membership.objects.get(user=user, team=mapped)
    assert (membership.role, membership.source) == ("lead", "sso")
    assert not user.has_usable_password() and user.email == "lee@example.com"
    identity = SsoIdentity.objects.get(user=user)
    assert (identity.issuer, identity.subject, identity.groups) == (sso_settings.issuer, "lee", sorted(LEAD_GROUPS))
    assert who(last_entry(membership)) == ("lee", "sign-in (SSO)")  # the audit trail names the sign-in
    assert AccessAttempt.objects.count() == 0  # the lockout never counted the SSO sign-in


def test_removed_from_the_lead_group_loses_lead_then_everything_at_next_sign_in(sso_settings: Provider, mapped) -> None:
    sso_settings.accounts({"lee": _account(LEAD_GROUPS)})
    provider_sign_in(Client(), sso_settings.issuer, "lee", "idp-pass")
    user = User.objects.get(username="lee")

    sso_settings.accounts({"lee": _account(["nlp", "all-staff"])})  # the IdP admin moves lee to members
    provider_sign_in(Client(), sso_settings.issuer, "lee", "idp-pass")
    membership = Membership.objects.get(user=user, team=mapped)
    assert membership.role == "member"
    assert who(last_entry(membership)) == ("lee", "sign-in (SSO)")

    sso_settings.accounts({"lee": _account(["all-staff"])})  # and then out of the team's groups altogether
    client = Client()
    response = provider_sign_in(client, sso_settings.issuer, "lee", "idp-pass")
    assert not Membership.objects.filter(user=user).exists()
    assert response["Location"] == "/oidc/no-team/"
    page = client.get("/oidc/no-team/")
    assert page.status_code == 200 and b"no team yet" in page.content and b"all-staff" in page.content
    assert client.get(f"/teams/{mapped.slug}/").status_code == 404  # no longer a member: not there at all
    deleted = LogEntry.objects.filter(object_repr__contains="lee", action=LogEntry.Action.DELETE).first()
    assert deleted is not None and deleted.actor == user


def test_a_membership_granted_by_hand_is_left_alone(sso_settings: Provider, mapped) -> None:
    vision = TeamFactory(name="Vision", slug="vision", namespace="team-vision")
    user = UserFactory(username="lee", password=None)
    user.set_unusable_password()  # made by the org file's members, waiting for its first sign-in
    user.save()
    MembershipFactory(user=user, team=vision, role="member")
    sso_settings.accounts({"lee": _account(["nlp"])})

    provider_sign_in(Client(), sso_settings.issuer, "lee", "idp-pass")

    roles = dict(Membership.objects.filter(user=user).values_list("team__slug", "source"))
    assert roles == {"nlp": "sso", "vision": "manual"}  # linked to the existing account, the manual grant kept


def test_org_roles_follow_the_groups_and_only_the_ones_sso_gave(sso_settings: Provider, mapped) -> None:
    sso_settings.accounts({"fin": _account(["finance-team", "platform"], email="fin@example.com")})
    provider_sign_in(Client(), sso_settings.issuer, "fin", "idp-pass")
    user = User.objects.get(username="fin")
    assert set(user.groups.values_list("name", flat=True)) == {FINANCE, PLATFORM_ADMIN}
    assert user.is_staff and user.is_superuser

    sso_settings.accounts({"fin": _account(["finance-team"], email="fin@example.com")})
    provider_sign_in(Client(), sso_settings.issuer, "fin", "idp-pass")
    user.refresh_from_db()
    assert list(user.groups.values_list("name", flat=True)) == [FINANCE]
    assert not user.is_staff and not user.is_superuser
    assert list(SsoOrgRole.objects.filter(user=user).values_list("role", flat=True)) == [FINANCE]


def test_a_local_admin_still_signs_in_with_a_password_and_cannot_be_taken_over(sso_settings: Provider, mapped) -> None:
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)  # the break-glass account
    client = Client()
    page = client.get("/accounts/login/")
    assert b"Sign in with Test IdP" in page.content and b'href="/oidc/authenticate/"' in page.content
    response = client.post("/accounts/login/", {"username": "root", "password": "pw-for-tests"})
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(admin.pk)

    # An IdP user who calls themselves "root" does not get the local account.
    sso_settings.accounts({"mallory": _account(["platform"], username="root")})
    intruder = Client()
    refused = provider_sign_in(intruder, sso_settings.issuer, "mallory", "idp-pass")
    assert refused.status_code == 403 and b"already exists here" in refused.content
    assert "_auth_user_id" not in intruder.session and not SsoIdentity.objects.exists()


def test_a_bad_state_or_nonce_is_refused(sso_settings: Provider, mapped) -> None:
    sso_settings.accounts({"lee": _account(LEAD_GROUPS)})
    client = Client()
    done = provider_sign_in(client, sso_settings.issuer, "lee", "idp-pass")
    assert done.status_code == 302
    client.logout()

    # A forged state (no sign-in of this browser started it).
    forged = client.get("/oidc/callback/", {"code": "whatever", "state": "forged"})
    assert forged.status_code == 400 and b"not started here" in forged.content

    # A nonce that is not the one the ID token carries: the session's is changed while the user is at the IdP.
    class NonceSwap(Client):
        def get(self, path, *args, **kwargs):  # type: ignore[no-untyped-def]
            if path.startswith("/oidc/callback/"):
                session = self.session
                for entry in session["oidc_states"].values():
                    entry["nonce"] = "not-the-nonce-sent"
                session.save()
            return super().get(path, *args, **kwargs)

    swapped = provider_sign_in(NonceSwap(), sso_settings.issuer, "lee", "idp-pass")
    assert swapped.status_code == 400 and b"did not check out" in swapped.content
    assert AccessAttempt.objects.count() == 0


def test_a_replayed_callback_is_refused(sso_settings: Provider, mapped) -> None:
    sso_settings.accounts({"lee": _account(LEAD_GROUPS)})

    class Recorder(Client):
        last_callback = ""

        def get(self, path, *args, **kwargs):  # type: ignore[no-untyped-def]
            if path.startswith("/oidc/callback/"):
                Recorder.last_callback = path
            return super().get(path, *args, **kwargs)

    client = Recorder()
    assert provider_sign_in(client, sso_settings.issuer, "lee", "idp-pass").status_code == 302
    replay = client.get(Recorder.last_callback)
    assert replay.status_code == 400


def test_sso_is_off_without_an_issuer(client, settings) -> None:
    settings.SSO_ENABLED = False
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/", {"code": "x", "state": "y"}).status_code == 404
    assert b"Sign in with" not in client.get("/accounts/login/").content
    Group.objects.get_or_create(name=FINANCE)
