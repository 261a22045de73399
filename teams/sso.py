"""Team memberships and organisation-wide roles from an identity provider's groups, recomputed at each sign-in.

The mapping from groups to roles is :class:`teams.models.SsoGroup` (written by ``teams apply`` from the org
file's ``sso_groups``). What single sign-on keeps, and what it leaves alone (docs/security.md, Single sign-on):

- A membership it created (``source=sso``) follows the groups: it gets the highest role any of the user's groups
  gives in that team (lead over member), changes role when the groups change, and is deleted when no group gives
  the team any more: a person removed from a group loses access at their next sign-in.
- A membership granted by hand (the admin, the org file's ``members``; ``source=manual``) is never changed or
  deleted here, even if the groups say otherwise: a platform admin granted it on purpose, and removing it is
  theirs to do. Delete it and the next sign-in recreates it from the groups, if any gives the team.
- The organisation-wide roles (``finance``, ``platform-admin``) likewise: a role single sign-on gave
  (:class:`teams.models.SsoOrgRole`) is taken away when the groups no longer give it; one given by hand stays.
  ``platform-admin`` comes with ``is_staff`` and ``is_superuser``, as ``teams apply`` gives them.

Every change is a saved or deleted row, so the audit trail records it; the caller names the actor
(``audit.context.acting``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import Group, User
from django.db import transaction

from teams.models import Membership, SsoGroup, SsoOrgRole
from teams.roles import ORG_ROLES, PLATFORM_ADMIN
from teams.services import org_roles_ensure

_RANK = {Membership.Role.MEMBER.value: 1, Membership.Role.LEAD.value: 2}


@dataclass(frozen=True)
class SsoAccess:
    """What a sign-in left the user with, and what it changed (``team-slug: old → new`` / ``role: given``)."""

    teams: tuple[str, ...]  # slugs of every team the user is in now, by hand or by groups
    org_roles: tuple[str, ...]
    changes: tuple[str, ...]

    @property
    def has_access(self) -> bool:
        return bool(self.teams or self.org_roles)


def _wanted_roles(groups: Iterable[str]) -> tuple[dict[int, str], set[str]]:
    """The role each team's mapped groups give (highest wins), and the organisation-wide roles."""
    team_roles: dict[int, str] = {}
    org_roles: set[str] = set()
    for team_id, role in SsoGroup.objects.filter(group__in=list(groups)).values_list("team_id", "role"):
        if team_id is None:
            org_roles.add(role)
        elif _RANK[role] > _RANK.get(team_roles.get(team_id, ""), 0):
            team_roles[team_id] = role
    return team_roles, org_roles


def _memberships_sync(user: User, team_roles: dict[int, str], changes: list[str]) -> None:
    wanted = dict(team_roles)
    for membership in Membership.objects.filter(user=user).select_related("team"):
        role = wanted.pop(membership.team_id, None)
        if membership.source != Membership.Source.SSO:
            continue  # granted by hand: the groups neither change nor remove it
        slug = membership.team.slug
        if role is None:
            membership.delete()
            changes.append(f"{slug}: {membership.role} → none")
        elif role != membership.role:
            changes.append(f"{slug}: {membership.role} → {role}")
            membership.role = role
            membership.save(update_fields=["role"])
    for membership in [
        Membership(user=user, team_id=team_id, role=role, source=Membership.Source.SSO)
        for team_id, role in wanted.items()
    ]:
        membership.save()
        changes.append(f"{membership.team.slug}: none → {membership.role}")


def _org_roles_sync(user: User, wanted: set[str], changes: list[str]) -> None:
    org_roles_ensure()
    held = set(user.groups.values_list("name", flat=True))
    given = {row.role: row for row in SsoOrgRole.objects.filter(user=user)}
    for role in sorted(wanted - held):
        user.groups.add(Group.objects.get(name=role))
        SsoOrgRole.objects.get_or_create(user=user, role=role)  # a row may outlive a group an admin removed
        changes.append(f"{role}: given")
        if role == PLATFORM_ADMIN:
            _admin_flags_set(user, on=True)
    for role in sorted(set(given) - wanted):
        given[role].delete()
        if role in held:
            user.groups.remove(Group.objects.get(name=role))
            changes.append(f"{role}: taken away")
        if role == PLATFORM_ADMIN:
            _admin_flags_set(user, on=False)


def _admin_flags_set(user: User, *, on: bool) -> None:
    if user.is_staff != on or user.is_superuser != on:
        user.is_staff = user.is_superuser = on
        user.save(update_fields=["is_staff", "is_superuser"])


def sso_access_sync(*, user: User, groups: Iterable[str]) -> SsoAccess:
    """Recompute ``user``'s single sign-on memberships and organisation-wide roles from ``groups`` (the
    provider's groups claim at this sign-in), in one transaction; see the module's docstring for the rules."""
    changes: list[str] = []
    with transaction.atomic():
        team_roles, org_roles = _wanted_roles(groups)
        _memberships_sync(user, team_roles, changes)
        _org_roles_sync(user, org_roles, changes)
        teams = tuple(Membership.objects.filter(user=user).order_by("team__slug").values_list("team__slug", flat=True))
        roles = tuple(sorted(user.groups.filter(name__in=ORG_ROLES).values_list("name", flat=True)))
    return SsoAccess(teams=teams, org_roles=roles, changes=tuple(changes))
