"""The org file's ``sso_groups`` (validated, applied by ``teams apply``) and the sign-in sync they drive
(``teams.sso``), without a provider: the end-to-end flow is tests/oidc/test_sso_flow.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

from teams.errors import OrgValidationError
from teams.models import Membership, SsoGroup, SsoOrgRole
from teams.orgfile import SsoGroupSpec, validate_org
from teams.roles import FINANCE, PLATFORM_ADMIN
from teams.services import org_apply
from teams.sso import sso_access_sync
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _team(**extra: Any) -> dict[str, Any]:
    return {"name": "Language Models", "slug": "nlp", "namespace": "team-nlp", **extra}


def _errors(data: object) -> list[str]:
    with pytest.raises(OrgValidationError) as exc_info:
        validate_org(data)
    return exc_info.value.errors


def test_sso_groups_validate_to_specs() -> None:
    spec = validate_org(
        {
            "teams": [_team(sso_groups={"lead": ["nlp-leads"], "member": ["nlp", "ml-all"]})],
            "sso_groups": {"finance": ["finance-team"], "platform_admins": ["platform"]},
        }
    )
    assert spec.teams is not None and spec.teams[0].sso_groups == (
        SsoGroupSpec("nlp-leads", "lead"),
        SsoGroupSpec("nlp", "member"),
        SsoGroupSpec("ml-all", "member"),
    )
    assert spec.sso_groups == (SsoGroupSpec("finance-team", FINANCE), SsoGroupSpec("platform", PLATFORM_ADMIN))
    assert validate_org({"teams": [_team()]}).teams[0].sso_groups is None  # type: ignore[index]  # absent: unmanaged


def test_sso_groups_errors_name_their_path() -> None:
    errors = _errors(
        {
            "teams": [_team(sso_groups={"lead": ["a", "a"], "member": ["", 3], "owner": ["x"]})],
            "sso_groups": {"finance": "fin", "admins": []},
        }
    )
    assert errors == [
        "teams[0].sso_groups.owner: unknown key 'owner'; allowed keys: lead, member",
        "teams[0].sso_groups.lead[1]: group 'a' is listed twice (also teams[0].sso_groups.lead[0]); give each group "
        "one role",
        "teams[0].sso_groups.member[0]: must not be empty",
        "teams[0].sso_groups.member[1]: must be a string, got number",
        "sso_groups.admins: unknown key 'admins'; allowed keys: finance, platform_admins",
        "sso_groups.finance: must be a list, got string",
    ]
    assert _errors({"teams": [_team(sso_groups=["nlp"])]}) == [
        "teams[0].sso_groups: must be an object with lead and/or member lists of group names, got list"
    ]
    assert _errors({"teams": [_team(sso_groups={"lead": ["g"], "member": ["g"]})]}) == [
        "teams[0].sso_groups.member[0]: group 'g' is listed twice (also teams[0].sso_groups.lead[0]); give each "
        "group one role"
    ]


def test_teams_apply_writes_the_mapping_idempotently_and_prunes_only_with_prune() -> None:
    data = {
        "teams": [_team(sso_groups={"lead": ["nlp-leads"], "member": ["nlp"]})],
        "sso_groups": {"finance": ["finance-team"]},
    }
    result = org_apply(spec=validate_org(data))
    assert result.keys("sso_group", "created") == ["nlp/lead/nlp-leads", "nlp/member/nlp", "finance/finance-team"]
    assert not org_apply(spec=validate_org(data)).changed

    data["teams"][0]["sso_groups"] = {"lead": ["nlp"]}  # type: ignore[index]  # nlp moves up, nlp-leads goes
    result = org_apply(spec=validate_org(data))
    assert result.keys("sso_group", "updated") == ["nlp/lead/nlp"]
    assert SsoGroup.objects.filter(group="nlp-leads").exists()  # without --prune, left as it is
    result = org_apply(spec=validate_org(data), prune=True)
    assert result.keys("sso_group", "deleted") == ["nlp/lead/nlp-leads"]
    rows = set(SsoGroup.objects.values_list("group", "team__slug", "role"))
    assert rows == {("nlp", "nlp", "lead"), ("finance-team", None, FINANCE)}


def test_teams_apply_members_and_prune_leave_sso_memberships_to_the_groups() -> None:
    team = TeamFactory(name="Language Models", slug="nlp", namespace="team-nlp")
    by_groups = MembershipFactory(team=team, user=UserFactory(username="lee"), role="lead", source="sso")
    taken_over = MembershipFactory(team=team, user=UserFactory(username="kim"), role="member", source="sso")
    by_hand = MembershipFactory(team=team, user=UserFactory(username="old"), role="member")

    result = org_apply(spec=validate_org({"teams": [_team(members=[{"username": "kim"}])]}), prune=True)

    assert result.keys("membership", "deleted") == ["nlp/old"]
    assert result.keys("membership", "updated") == ["nlp/kim"]
    assert Membership.objects.filter(pk=by_groups.pk).exists()
    taken_over.refresh_from_db()
    assert taken_over.source == "manual"  # listed in the file: granted by hand from now on
    assert not Membership.objects.filter(pk=by_hand.pk).exists()


def test_sync_gives_the_highest_role_and_keeps_manual_grants() -> None:
    nlp = TeamFactory(slug="nlp")
    vision = TeamFactory(slug="vision")
    SsoGroup.objects.create(group="ml", team=nlp, role="member")
    SsoGroup.objects.create(group="nlp-leads", team=nlp, role="lead")
    SsoGroup.objects.create(group="ml", team=vision, role="member")
    user = UserFactory(username="lee")
    MembershipFactory(user=user, team=vision, role="lead")  # by hand: the groups say member, the admin said lead

    access = sso_access_sync(user=user, groups=["ml", "nlp-leads", "unmapped"])

    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {
        "nlp": "lead",
        "vision": "lead",
    }
    assert access.teams == ("nlp", "vision") and access.changes == ("nlp: none → lead",)
    assert not sso_access_sync(user=user, groups=["ml", "nlp-leads"]).changes  # same groups: nothing changes


def test_sync_leaves_an_org_role_given_by_hand() -> None:
    SsoGroup.objects.create(group="fin", role=FINANCE)
    user = UserFactory(username="carol")
    user.groups.add(Group.objects.get_or_create(name=FINANCE)[0])  # given by hand (org file's finance)

    assert sso_access_sync(user=user, groups=["fin"]).changes == ()
    assert sso_access_sync(user=user, groups=[]).org_roles == (FINANCE,)  # not SSO's to take away
    assert not SsoOrgRole.objects.exists()
    access = sso_access_sync(user=UserFactory(username="nobody"), groups=["unmapped"])
    assert not access.has_access
