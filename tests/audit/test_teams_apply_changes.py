"""What `manage.py teams apply` changes is in the audit trail: the person its --actor names, or 'teams apply'
when it names none; quotas, memberships, roles and team settings with their before → after."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from teams.models import Membership, Quota, Team
from teams.roles import FINANCE
from tests.audit.helpers import changes, last_entry, who
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _org(
    *, guaranteed: int = 8, role: str = "member", weight: int = 1, finance: list[str] | None = None
) -> dict[str, Any]:
    return {
        "teams": [
            {
                "name": "Language Models",
                "slug": "nlp",
                "namespace": "team-nlp",
                "weight": weight,
                "quotas": [{"gpu_class": "any", "guaranteed": guaranteed, "burst": 16}],
                "members": [{"username": "bob", "role": role}],
            }
        ],
        "finance": finance if finance is not None else [],
    }


def _apply(tmp_path: Path, org: dict[str, Any], *args: str) -> None:
    path = tmp_path / "org.json"
    path.write_text(json.dumps(org))
    call_command("teams", "apply", str(path), *args, stdout=StringIO(), stderr=StringIO())


def test_apply_names_its_actor_on_every_change(tmp_path: Path) -> None:
    UserFactory(username="dave")
    _apply(tmp_path, _org(), "--actor", "dave")
    team = Team.objects.get(slug="nlp")
    for row in (team, Quota.objects.get(team=team), Membership.objects.get(team=team)):
        entry = last_entry(row)
        assert entry.action == LogEntry.Action.CREATE
        assert who(entry) == ("dave", "teams apply")

    _apply(tmp_path, _org(guaranteed=4, role="lead", weight=2, finance=["carol"]), "--actor", "dave")
    assert changes(last_entry(Quota.objects.get(team=team))) == {"guaranteed_gpus": ("8.000", "4")}
    assert changes(last_entry(Membership.objects.get(team=team))) == {"role": ("member", "lead")}
    assert changes(last_entry(team)) == {"weight": ("1", "2")}
    carol = User.objects.get(username="carol")
    role = last_entry(carol)
    assert who(role) == ("dave", "teams apply") and changes(role) == {"groups": ("", FINANCE)}


def test_a_priority_grant_in_the_file_is_audited(tmp_path: Path) -> None:
    UserFactory(username="dave")
    _apply(tmp_path, _org(), "--actor", "dave")
    org = _org()
    org["teams"][0].update(max_priority="production", production_kinds=["inference", "training"])
    _apply(tmp_path, org, "--actor", "dave")
    entry = last_entry(Team.objects.get(slug="nlp"))
    assert who(entry) == ("dave", "teams apply")
    assert changes(entry) == {
        "max_priority": ("high", "production"),
        "production_kinds": ('["inference"]', '["training", "inference"]'),
    }


def test_apply_without_an_actor_is_recorded_as_teams_apply(tmp_path: Path) -> None:
    _apply(tmp_path, _org())
    entry = last_entry(Quota.objects.get(team__slug="nlp"))
    assert entry.actor is None
    assert who(entry) == ("teams apply", "teams apply")


def test_an_unknown_actor_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="--actor 'nobody': no such user"):
        _apply(tmp_path, _org(), "--actor", "nobody")
    assert not Team.objects.exists() and not LogEntry.objects.exists()


def test_a_dry_run_leaves_no_audit_row(tmp_path: Path) -> None:
    _apply(tmp_path, _org(), "--dry-run")
    assert not LogEntry.objects.exists()
