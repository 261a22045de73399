"""Writes to teams, projects, quotas, memberships and the organisation-wide roles.

``org_apply`` is the one place an organisation file reaches the database; the management command, the demo
seed and anything else declarative go through it so they share matching, pruning and change reporting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import IntegrityError, models, transaction

from teams.errors import OrgApplyError
from teams.models import Membership, Project, Quota, SsoGroup, Team
from teams.orgfile import MemberSpec, OrgSpec, ProjectSpec, QuotaSpec, SsoGroupSpec, TeamSpec
from teams.roles import FINANCE, ORG_ROLES, PLATFORM_ADMIN

CREATED, UPDATED, DELETED = "created", "updated", "deleted"
ACTIONS = (CREATED, UPDATED, DELETED)
# Report order: what a reader scans for first.
KINDS = ("team", "project", "quota", "user", "membership", "org_role", "sso_group")


@dataclass(frozen=True)
class OrgChange:
    """One row changed by ``org_apply``.

    ``key`` identifies the row the way the file does: ``nlp`` (team), ``nlp/chat`` (project), ``nlp/H100``
    (quota), ``nlp/alice`` (membership), ``alice`` (user), ``finance/carol`` (org role), ``nlp/lead/ml-leads``
    or ``finance/finance-team`` (single sign-on group). ``details`` lists
    ``field: old → new`` for updates.
    """

    kind: str
    action: str
    key: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class OrgApplyResult:
    """What ``org_apply`` changed (or, for a dry run, would change); empty when the database already matched."""

    changes: tuple[OrgChange, ...] = ()
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def keys(self, kind: str, action: str) -> list[str]:
        """Identifiers of the rows of ``kind`` that had ``action`` applied, in apply order."""
        return [c.key for c in self.changes if c.kind == kind and c.action == action]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{kind: {action: n}}`` for every kind and action that occurred."""
        counts: dict[str, dict[str, int]] = {}
        for change in self.changes:
            counts.setdefault(change.kind, {}).setdefault(change.action, 0)
            counts[change.kind][change.action] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form: ``{"dry_run", "changed", "counts", "changes": [{kind, action, key, details}]}``."""
        return {
            "dry_run": self.dry_run,
            "changed": self.changed,
            "counts": self.counts(),
            "changes": [
                {"kind": c.kind, "action": c.action, "key": c.key, "details": list(c.details)} for c in self.changes
            ],
        }


class _Run:
    """State of one apply: the change log, users by name, and deletions that references blocked."""

    def __init__(self, *, prune: bool) -> None:
        self.prune = prune
        self.changes: list[OrgChange] = []
        self.blocked: list[str] = []
        self.users: dict[str, User] = {}

    def record(self, kind: str, action: str, key: str, details: Iterable[str] = ()) -> None:
        self.changes.append(OrgChange(kind=kind, action=action, key=key, details=tuple(details)))

    def delete(self, kind: str, key: str, obj: models.Model) -> None:
        """Delete ``obj``, or note why not: a PROTECT/RESTRICT reference (jobs, ledger) must stop the apply."""
        try:
            obj.delete()
        except (models.ProtectedError, models.RestrictedError) as exc:
            objects = exc.protected_objects if isinstance(exc, models.ProtectedError) else exc.restricted_objects
            metas = Counter(o._meta for o in objects)
            refs = ", ".join(
                f"{n} {meta.verbose_name if n == 1 else meta.verbose_name_plural}"
                for meta, n in sorted(metas.items(), key=lambda item: item[0].label)
            )
            self.blocked.append(f"cannot delete {kind} {key!r}: still referenced by {refs}")
        else:
            self.record(kind, DELETED, key)


def _diff(obj: models.Model, wanted: dict[str, Any]) -> list[str]:
    """Set the fields of ``obj`` that differ from ``wanted``; return ``field: old → new`` for each."""
    details = []
    for field, value in wanted.items():
        old = getattr(obj, field)
        if old != value:  # Decimal("4.000") == Decimal("4"): scale alone is not a change
            details.append(f"{field}: {old} → {value}")
            setattr(obj, field, value)
    return details


def org_roles_ensure() -> None:
    """Make sure the organisation-wide role groups (``finance``, ``platform-admin``) exist."""
    for name in ORG_ROLES:
        Group.objects.get_or_create(name=name)


def _users_ensure(run: _Run, usernames: Iterable[str]) -> None:
    """Load or create every named user; new users get no usable password (they sign in through SSO)."""
    user_model = get_user_model()
    wanted = sorted(set(usernames))
    field = user_model.USERNAME_FIELD
    run.users = {getattr(u, field): u for u in user_model.objects.filter(**{f"{field}__in": wanted})}
    for username in wanted:
        if username not in run.users:
            user = user_model(**{field: username})
            user.set_unusable_password()
            user.save()
            run.users[username] = user
            run.record("user", CREATED, username)


def _projects_apply(run: _Run, team: Team, projects: tuple[ProjectSpec, ...]) -> None:
    current = {p.code: p for p in Project.objects.filter(team=team)}
    for spec in projects:
        key = f"{team.slug}/{spec.code}"
        project = current.pop(spec.code, None)
        if project is None:
            Project.objects.create(team=team, code=spec.code, name=spec.name)
            run.record("project", CREATED, key)
        elif details := _diff(project, {"name": spec.name}):
            project.save(update_fields=["name"])
            run.record("project", UPDATED, key, details)
    if run.prune:
        for code in sorted(current):
            run.delete("project", f"{team.slug}/{code}", current[code])


def _quotas_apply(run: _Run, team: Team, quotas: tuple[QuotaSpec, ...]) -> None:
    current = {q.gpu_class: q for q in Quota.objects.filter(team=team)}
    for spec in quotas:
        key = f"{team.slug}/{spec.gpu_class}"
        quota = current.pop(spec.gpu_class, None)
        wanted = {"guaranteed_gpus": spec.guaranteed, "burst_gpus": spec.burst}
        if quota is None:
            Quota.objects.create(team=team, gpu_class=spec.gpu_class, **wanted)
            run.record("quota", CREATED, key)
        elif details := _diff(quota, wanted):
            quota.save(update_fields=list(wanted))
            run.record("quota", UPDATED, key, details)
    if run.prune:
        for gpu_class in sorted(current):
            run.delete("quota", f"{team.slug}/{gpu_class}", current[gpu_class])


def _members_apply(run: _Run, team: Team, members: tuple[MemberSpec, ...]) -> None:
    """The file's members are granted by hand: a listed member whose membership single sign-on made is taken over
    (``source: sso → manual``); ``--prune`` deletes only memberships granted by hand, since the groups keep the
    others (teams.sso)."""
    memberships = Membership.objects.filter(team=team).select_related("user")
    current = {m.user.get_username(): m for m in memberships}
    for spec in members:
        key = f"{team.slug}/{spec.username}"
        membership = current.pop(spec.username, None)
        if membership is None:
            Membership.objects.create(team=team, user=run.users[spec.username], role=spec.role)
            run.record("membership", CREATED, key, [f"role: {spec.role}"])
        elif details := _diff(membership, {"role": spec.role, "source": Membership.Source.MANUAL.value}):
            membership.save(update_fields=["role", "source"])
            run.record("membership", UPDATED, key, details)
    current = {name: m for name, m in current.items() if m.source == Membership.Source.MANUAL}
    if run.prune:
        for username in sorted(current):
            run.delete("membership", f"{team.slug}/{username}", current[username])


def _teams_apply(run: _Run, teams: tuple[TeamSpec, ...]) -> None:
    current = {t.slug: t for t in Team.objects.all()}
    for spec in teams:
        team = current.pop(spec.slug, None)
        wanted: dict[str, Any] = {"name": spec.name, "namespace": spec.namespace, "weight": spec.weight}
        if spec.checkpoint_claim is not None:  # None: the file leaves the claim as it is
            wanted["checkpoint_claim"] = spec.checkpoint_claim
        # The priority grant likewise: a file without it leaves what an admin granted in the admin.
        if spec.max_priority is not None:
            wanted["max_priority"] = spec.max_priority
        if spec.production_kinds is not None:
            wanted["production_kinds"] = list(spec.production_kinds)
        if team is None:
            team = Team.objects.create(slug=spec.slug, **wanted)
            run.record("team", CREATED, spec.slug)
        elif details := _diff(team, wanted):
            team.save(update_fields=list(wanted))
            run.record("team", UPDATED, spec.slug, details)
        # None: the file does not manage this part of the team, so neither create nor prune there.
        if spec.projects is not None:
            _projects_apply(run, team, spec.projects)
        if spec.quotas is not None:
            _quotas_apply(run, team, spec.quotas)
        if spec.members is not None:
            _members_apply(run, team, spec.members)
        if spec.sso_groups is not None:
            _sso_groups_apply(run, team, spec.sso_groups)
    if run.prune:
        # Deleting a team cascades to its projects, quotas and memberships; jobs and ledger rows protect it.
        for slug in sorted(current):
            run.delete("team", slug, current[slug])


def _sso_groups_apply(run: _Run, team: Team | None, groups: tuple[SsoGroupSpec, ...]) -> None:
    """The single sign-on mapping of ``team`` (None: the organisation-wide roles). A group's role changes in
    place; ``--prune`` deletes groups the file no longer lists. Memberships follow at each user's next sign-in."""
    current = {g.group: g for g in SsoGroup.objects.filter(team=team)}
    prefix = f"{team.slug}/" if team is not None else ""  # keys: nlp/lead/ml-leads, finance/finance-team
    for spec in groups:
        key = f"{prefix}{spec.role}/{spec.group}"
        row = current.pop(spec.group, None)
        if row is None:
            SsoGroup.objects.create(team=team, group=spec.group, role=spec.role)
            run.record("sso_group", CREATED, key)
        elif details := _diff(row, {"role": spec.role}):
            row.save(update_fields=["role"])
            run.record("sso_group", UPDATED, key, details)
    if run.prune:
        for group in sorted(current):
            run.delete("sso_group", f"{prefix}{current[group].role}/{group}", current[group])


def _org_role_apply(run: _Run, role: str, usernames: tuple[str, ...], *, admin_flags: bool) -> None:
    """Put exactly ``usernames`` (or, without prune, at least them) in the ``role`` group.

    Platform admins also get ``is_staff`` and ``is_superuser`` so the Django admin lets them do everything;
    pruning a platform admin clears both flags again. Superusers outside the group are never touched.
    """
    group = Group.objects.get(name=role)
    user_model = get_user_model()
    holders = {u.get_username(): u for u in user_model.objects.filter(groups=group)}
    for username in usernames:
        user = run.users[username]
        if username not in holders:
            user.groups.add(group)
            run.record("org_role", CREATED, f"{role}/{username}")
        if admin_flags and (details := _diff(user, {"is_staff": True, "is_superuser": True})):
            user.save(update_fields=["is_staff", "is_superuser"])
            run.record("user", UPDATED, username, details)
    if not run.prune:
        return
    for username in sorted(set(holders) - set(usernames)):
        user = holders[username]
        user.groups.remove(group)
        run.record("org_role", DELETED, f"{role}/{username}")
        if admin_flags and (details := _diff(user, {"is_staff": False, "is_superuser": False})):
            user.save(update_fields=["is_staff", "is_superuser"])
            run.record("user", UPDATED, username, details)


def org_apply(*, spec: OrgSpec, prune: bool = False, dry_run: bool = False) -> OrgApplyResult:
    """Make the database match a validated organisation spec, in one transaction.

    Teams are matched by slug, projects by (team, code), quotas by (team, gpu_class), memberships by
    (user, team); missing users are created without a usable password. Without ``prune`` rows absent from the
    spec stay; with it they are deleted and unlisted users lose the finance / platform-admin group. Parts of
    the spec that are ``None`` are not managed at all. Applying the same spec twice returns an empty result.

    ``dry_run`` computes the same result and rolls back. Raises ``OrgApplyError`` (nothing written) when a
    deletion is blocked by jobs or ledger rows, or when the database rejects a row (e.g. a concurrent
    change took a namespace after validation).
    """
    run = _Run(prune=prune)
    try:
        with transaction.atomic():
            org_roles_ensure()
            usernames: list[str] = [*(spec.finance or ()), *(spec.platform_admins or ())]
            for team in spec.teams or ():
                usernames.extend(m.username for m in team.members or ())
            _users_ensure(run, usernames)
            if spec.teams is not None:
                _teams_apply(run, spec.teams)
            if spec.finance is not None:
                _org_role_apply(run, FINANCE, spec.finance, admin_flags=False)
            if spec.platform_admins is not None:
                _org_role_apply(run, PLATFORM_ADMIN, spec.platform_admins, admin_flags=True)
            if spec.sso_groups is not None:
                _sso_groups_apply(run, None, spec.sso_groups)
            if run.blocked:
                raise OrgApplyError(run.blocked)  # leaving the atomic block by exception rolls back everything
            if dry_run:
                transaction.set_rollback(True)
    except IntegrityError as exc:
        raise OrgApplyError([f"the database rejected the change: {exc}"]) from exc
    return OrgApplyResult(changes=tuple(run.changes), dry_run=dry_run)
