"""``manage.py teams apply``: org files reach the database completely, idempotently, or not at all."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from teams.errors import OrgApplyError
from teams.models import Membership, Project, Quota, Team
from teams.orgfile import OrgSpec, TeamSpec, validate_org
from teams.roles import FINANCE, PLATFORM_ADMIN
from teams.services import org_apply, org_roles_ensure
from tests.factories import JobFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent / "data"
User = get_user_model()


def run(*args: str) -> tuple[str, str]:
    """Call ``teams`` like the command line does; return (stdout, stderr)."""
    out, err = StringIO(), StringIO()
    call_command("teams", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def run_failing(*args: str) -> tuple[str, str]:
    """Call ``teams`` expecting a CommandError; return (error message, stderr)."""
    err = StringIO()
    with pytest.raises(CommandError) as exc_info:
        call_command("teams", *args, stdout=StringIO(), stderr=err)
    return str(exc_info.value), err.getvalue()


def state() -> dict[str, Any]:
    """Every row the command may write, in comparable form: equal states mean nothing was written."""
    return {
        "teams": sorted(Team.objects.values_list("slug", "name", "namespace", "weight")),
        "projects": sorted(Project.objects.values_list("team__slug", "code", "name")),
        "quotas": sorted(Quota.objects.values_list("team__slug", "gpu_class", "guaranteed_gpus", "burst_gpus")),
        "memberships": sorted(Membership.objects.values_list("team__slug", "user__username", "role")),
        "users": sorted(User.objects.values_list("username", "is_staff", "is_superuser")),
        "groups": sorted(User.groups.through.objects.values_list("group__name", "user__username")),
    }


def base_org() -> dict[str, Any]:
    return json.loads((DATA / "org.json").read_text())


def write(tmp_path: Path, data: dict[str, Any], name: str = "org.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return str(path)


# ------------------------------------------------------------------------------------------ valid files


@pytest.mark.parametrize("filename", ["org.json", "org.yaml"])
def test_apply_creates_the_organisation(filename: str) -> None:
    out, err = run("apply", str(DATA / filename))

    assert err == ""
    assert f"Applied {DATA / filename}:" in out
    assert "team created: nlp" in out
    assert sorted(Team.objects.values_list("slug", "name", "namespace", "weight")) == [
        ("nlp", "Language Models", "team-nlp", 2),
        ("vision", "Vision", "team-vision", 1),  # weight defaults to 1
    ]
    assert sorted(Project.objects.values_list("team__slug", "code", "name")) == [
        ("nlp", "chat", ""),
        ("nlp", "llm-pretrain", "LLM pretraining"),
        ("vision", "CC-1042", "Detection"),
    ]
    quotas = {(q.team.slug, q.gpu_class): (q.guaranteed_gpus, q.burst_gpus) for q in Quota.objects.all()}
    assert quotas == {
        ("nlp", "any"): (Decimal(16), Decimal(32)),
        ("nlp", "H100"): (Decimal(8), Decimal(16)),
        ("vision", "A100"): (Decimal("2.5"), Decimal("4.125")),  # exact, not a float's neighbour
    }
    assert sorted(Membership.objects.values_list("team__slug", "user__username", "role")) == [
        ("nlp", "alice", "lead"),
        ("nlp", "bob", "member"),
        ("vision", "bob", "member"),  # role defaults to member
        ("vision", "erin", "lead"),
    ]
    carol, dave = User.objects.get(username="carol"), User.objects.get(username="dave")
    assert list(carol.groups.values_list("name", flat=True)) == [FINANCE]
    assert not (carol.is_staff or carol.is_superuser)
    assert list(dave.groups.values_list("name", flat=True)) == [PLATFORM_ADMIN]
    assert dave.is_staff and dave.is_superuser
    # Created users sign in through the configured login method, never with a password.
    assert not any(u.has_usable_password() for u in User.objects.all())


def test_existing_users_are_reused_with_their_password() -> None:
    UserFactory(username="alice")

    out, _ = run("apply", str(DATA / "org.json"))

    assert User.objects.get(username="alice").check_password("pw-for-tests")
    assert "user created: alice" not in out
    assert "user created: bob" in out


def test_reapplying_reports_no_changes_and_writes_nothing() -> None:
    run("apply", str(DATA / "org.json"))
    before = state()

    out, _ = run("apply", str(DATA / "org.json"))
    # The YAML file describes the same organisation, so it is a no-op too.
    yaml_out, _ = run("apply", str(DATA / "org.yaml"))

    assert out.strip() == f"No changes: the database already matches {DATA / 'org.json'}."
    assert yaml_out.strip() == f"No changes: the database already matches {DATA / 'org.yaml'}."
    assert state() == before


def test_json_output_lists_changes_per_kind() -> None:
    out, _ = run("apply", str(DATA / "org.json"), "--json")
    result = json.loads(out)

    assert result["file"] == str(DATA / "org.json")
    assert result["changed"] is True and result["dry_run"] is False
    assert result["counts"]["team"] == {"created": 2}
    assert result["counts"]["quota"] == {"created": 3}
    assert result["counts"]["membership"] == {"created": 4}
    assert {"kind": "org_role", "action": "created", "key": "platform-admin/dave", "details": []} in result["changes"]

    again = json.loads(run("apply", str(DATA / "org.json"), "--json")[0])
    assert again["changed"] is False and again["changes"] == [] and again["counts"] == {}


def test_changing_values_updates_them(tmp_path: Path) -> None:
    run("apply", str(DATA / "org.json"))
    org = base_org()
    org["teams"][0]["name"] = "Large Language Models"
    org["teams"][0]["weight"] = 3
    org["teams"][0]["quotas"][1]["burst"] = 24.5
    org["teams"][0]["members"][1]["role"] = "lead"
    org["teams"][1]["projects"][0]["name"] = "Object detection"

    out, _ = run("apply", write(tmp_path, org))

    team = Team.objects.get(slug="nlp")
    assert (team.name, team.weight) == ("Large Language Models", 3)
    assert Quota.objects.get(team=team, gpu_class="H100").burst_gpus == Decimal("24.5")
    assert Membership.objects.get(team=team, user__username="bob").role == "lead"
    assert Project.objects.get(code="CC-1042").name == "Object detection"
    assert "team updated: nlp (name: Language Models → Large Language Models; weight: 2 → 3)" in out
    assert "quota updated: nlp/H100 (burst_gpus: 16.000 → 24.5)" in out
    assert "membership updated: nlp/bob (role: member → lead)" in out
    assert out.strip().endswith("0 created, 4 updated, 0 deleted.")


def test_the_checkpoint_claim_is_set_cleared_and_left_alone_when_absent(tmp_path: Path) -> None:
    run("apply", str(DATA / "org.json"))
    org = base_org()
    org["teams"][0]["checkpoint_claim"] = "nlp-scratch"

    out, _ = run("apply", write(tmp_path, org))

    assert Team.objects.get(slug="nlp").checkpoint_claim == "nlp-scratch"
    assert "team updated: nlp (checkpoint_claim:  → nlp-scratch)" in out
    del org["teams"][0]["checkpoint_claim"]  # absent: the file does not manage it
    assert run("apply", write(tmp_path, org))[0].startswith("No changes")
    assert Team.objects.get(slug="nlp").checkpoint_claim == "nlp-scratch"
    org["teams"][0]["checkpoint_claim"] = ""  # back to Microcosm's own claim
    run("apply", write(tmp_path, org))
    assert Team.objects.get(slug="nlp").checkpoint_claim == ""


def test_the_priority_grant_round_trips_and_is_left_alone_when_absent(tmp_path: Path) -> None:
    run("apply", str(DATA / "org.json"))
    nlp, vision = Team.objects.get(slug="nlp"), Team.objects.get(slug="vision")
    assert (nlp.max_priority, nlp.production_kinds) == ("production", ["inference"])  # granted in the file
    assert (vision.max_priority, vision.production_kinds) == ("high", ["inference"])  # absent: the default
    org = base_org()
    org["teams"][0]["production_kinds"] = ["training", "inference"]

    out, _ = run("apply", write(tmp_path, org))

    assert Team.objects.get(slug="nlp").production_kinds == ["training", "inference"]
    assert "team updated: nlp (production_kinds: ['inference'] → ['training', 'inference'])" in out
    assert run("apply", write(tmp_path, org))[0].startswith("No changes")  # idempotent
    del org["teams"][0]["max_priority"], org["teams"][0]["production_kinds"]  # absent: not managed
    assert run("apply", write(tmp_path, org))[0].startswith("No changes")
    org["teams"][0]["max_priority"] = "high"  # revoked
    out, _ = run("apply", write(tmp_path, org))
    assert "team updated: nlp (max_priority: production → high)" in out
    assert Team.objects.get(slug="nlp").max_priority == "high"


def shrunk_org() -> dict[str, Any]:
    """The base org without vision, nlp's chat project, H100 quota and bob, and with no org roles."""
    org = base_org()
    del org["teams"][1]
    nlp = org["teams"][0]
    nlp["projects"] = [p for p in nlp["projects"] if p["code"] != "chat"]
    nlp["quotas"] = [q for q in nlp["quotas"] if q["gpu_class"] != "H100"]
    nlp["members"] = [m for m in nlp["members"] if m["username"] != "bob"]
    org["finance"], org["platform_admins"] = [], []
    return org


def test_without_prune_absent_things_stay(tmp_path: Path) -> None:
    run("apply", str(DATA / "org.json"))
    before = state()

    out, _ = run("apply", write(tmp_path, shrunk_org()))

    assert out.strip() == f"No changes: the database already matches {tmp_path / 'org.json'}."
    assert state() == before


def test_prune_removes_what_the_file_no_longer_lists(tmp_path: Path, superuser) -> None:
    run("apply", str(DATA / "org.json"))

    out, _ = run("apply", write(tmp_path, shrunk_org()), "--prune")

    assert list(Team.objects.values_list("slug", flat=True)) == ["nlp"]
    assert list(Project.objects.values_list("code", flat=True)) == ["llm-pretrain"]
    assert list(Quota.objects.values_list("gpu_class", flat=True)) == ["any"]
    assert list(Membership.objects.values_list("user__username", flat=True)) == ["alice"]
    carol, dave = User.objects.get(username="carol"), User.objects.get(username="dave")
    assert not carol.groups.exists() and not dave.groups.exists()
    assert not (dave.is_staff or dave.is_superuser)
    superuser.refresh_from_db()  # a superuser outside the platform-admin group is not the file's business
    assert superuser.is_staff and superuser.is_superuser
    for line in (
        "team deleted: vision",
        "project deleted: nlp/chat",
        "quota deleted: nlp/H100",
        "membership deleted: nlp/bob",
        "org role deleted: finance/carol",
        "user updated: dave (is_staff: True → False; is_superuser: True → False)",
    ):
        assert line in out
    # Users themselves are never deleted: they may own jobs and ledger history.
    assert User.objects.filter(username__in=["bob", "erin"]).count() == 2

    again, _ = run("apply", str(tmp_path / "org.json"), "--prune")
    assert again.startswith("No changes")


def test_prune_leaves_parts_the_file_does_not_mention(tmp_path: Path) -> None:
    run("apply", str(DATA / "org.json"))
    org = base_org()
    for team in org["teams"]:
        del team["members"]
    del org["finance"], org["platform_admins"]
    before = state()

    out, _ = run("apply", write(tmp_path, org), "--prune")

    assert out.startswith("No changes")
    assert state() == before


def test_dry_run_writes_nothing_and_reports_the_same_changes(tmp_path: Path) -> None:
    dry = json.loads(run("apply", str(DATA / "org.json"), "--dry-run", "--json")[0])
    assert state() == {"teams": [], "projects": [], "quotas": [], "memberships": [], "users": [], "groups": []}
    text, _ = run("apply", str(DATA / "org.json"), "--dry-run")
    assert "nothing was written" in text.splitlines()[0]

    real = json.loads(run("apply", str(DATA / "org.json"), "--json")[0])

    assert dry["dry_run"] is True and real["dry_run"] is False
    assert dry["changes"] == real["changes"]
    before = state()
    run("apply", write(tmp_path, shrunk_org()), "--prune", "--dry-run")
    assert state() == before


# ----------------------------------------------------------------------------------------- invalid files


def _set(*path: str | int, value: Any) -> Callable[[dict], None]:
    def mutate(org: dict) -> None:
        target = org
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(*path: str | int) -> Callable[[dict], None]:
    def mutate(org: dict) -> None:
        target = org
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


def _append(*path: str | int, value: Any) -> Callable[[dict], None]:
    def mutate(org: dict) -> None:
        target = org
        for key in path:
            target = target[key]
        target.append(copy.deepcopy(value))

    return mutate


def _legacy_team() -> None:
    TeamFactory(slug="legacy", name="Legacy", namespace="team-audio")


INVALID = [
    # id, mutation of the base org (which adds a valid "audio" team as teams[2]), DB setup, expected error
    ("unknown-key", _set("teams", 0, "colour", value="red"), None, "teams[0].colour: unknown key 'colour'; allowed"),
    ("unknown-top-key", _set("admins", value=["x"]), None, "admins: unknown key 'admins'; allowed keys: teams,"),
    ("missing-slug", _delete("teams", 1, "slug"), None, "teams[1].slug: required"),
    ("bad-slug", _set("teams", 1, "slug", value="Vision_1"), None, "teams[1].slug: 'Vision_1' is not a valid slug"),
    ("bad-namespace", _set("teams", 0, "namespace", value="Team_NLP"), None, "teams[0].namespace: 'Team_NLP' is not"),
    (
        "duplicate-namespace",
        _set("teams", 2, "namespace", value="team-nlp"),
        None,
        "teams[2].namespace: duplicate namespace 'team-nlp' (also teams[0])",
    ),
    (
        "namespace-taken-in-db",
        lambda org: None,
        _legacy_team,
        "teams[2].namespace: 'team-audio' is already used by existing team 'legacy'",
    ),
    (
        "burst-below-guaranteed",
        _set("teams", 0, "quotas", 1, "burst", value=4),
        None,
        "teams[0].quotas[1].burst: must be ≥ guaranteed (8)",
    ),
    (
        "unknown-gpu-class",
        _set("teams", 0, "quotas", 0, "gpu_class", value="V100"),
        None,
        "teams[0].quotas[0].gpu_class: unknown GPU class 'V100'; use one of any, A100, H100, H200",
    ),
    (
        "duplicate-quota-class",
        _set("teams", 0, "quotas", 1, "gpu_class", value="any"),
        None,
        "teams[0].quotas[1].gpu_class: duplicate GPU class 'any' (also teams[0].quotas[0])",
    ),
    ("weight-zero", _set("teams", 0, "weight", value=0), None, "teams[0].weight: must be a positive integer, got 0"),
    ("weight-fraction", _set("teams", 0, "weight", value=1.5), None, "teams[0].weight: must be a positive integer"),
    (
        "weight-string",
        _set("teams", 0, "weight", value="2"),
        None,
        "teams[0].weight: must be a positive integer, got string",
    ),
    (
        "weight-bool",
        _set("teams", 0, "weight", value=True),
        None,
        "teams[0].weight: must be a positive integer, got boolean",
    ),
    (
        "negative-guaranteed",
        _set("teams", 0, "quotas", 0, "guaranteed", value=-1),
        None,
        "teams[0].quotas[0].guaranteed: must be a non-negative number, got -1",
    ),
    (
        "bad-role",
        _set("teams", 0, "members", 0, "role", value="owner"),
        None,
        "teams[0].members[0].role: must be one of lead, member, got 'owner'",
    ),
    (
        "duplicate-member",
        _append("teams", 0, "members", value={"username": "alice", "role": "member"}),
        None,
        "teams[0].members[2].username: duplicate member 'alice' (also teams[0].members[0])",
    ),
    (
        "bad-username",
        _set("teams", 0, "members", 0, "username", value="alice smith"),
        None,
        "teams[0].members[0].username: Enter a valid username.",
    ),
    (
        "duplicate-project-code",
        _append("teams", 1, "projects", value={"code": "CC-1042"}),
        None,
        "teams[1].projects[1].code: duplicate project code 'CC-1042' (also teams[1].projects[0])",
    ),
    (
        "bad-max-priority",
        _set("teams", 0, "max_priority", value="urgent"),
        None,
        "teams[0].max_priority: must be one of production, high, normal, low (highest first), got string 'urgent'",
    ),
    (
        "bad-production-kind",
        _set("teams", 0, "production_kinds", 0, value="serving"),
        None,
        "teams[0].production_kinds[0]: must be a job kind (training, inference, batch), got string 'serving'",
    ),
    (
        "empty-production-kinds",
        _set("teams", 0, "production_kinds", value=[]),
        None,
        "teams[0].production_kinds: must be a non-empty list of job kinds (training, inference, batch), got an "
        "empty list; to grant no production, set max_priority below production",
    ),
    ("non-list-teams", lambda org: org.update(teams={"slug": "nlp"}), None, "teams: must be a list, got object"),
    ("non-list-finance", _set("finance", value="carol"), None, "finance: must be a list, got string"),
]


@pytest.mark.parametrize("filename", ["org.json", "org.yaml"])
@pytest.mark.parametrize(("mutate", "setup", "expected"), [case[1:] for case in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_file_reports_the_path_and_writes_nothing(
    tmp_path: Path, filename: str, mutate: Callable[[dict], None], setup: Callable[[], None] | None, expected: str
) -> None:
    run("apply", str(DATA / "org.json"))
    if setup is not None:
        setup()
    org = base_org()
    # A valid new team and a valid change ride along, so a partial write would show up in the state.
    org["teams"].append({"name": "Audio", "slug": "audio", "namespace": "team-audio", "projects": [{"code": "asr"}]})
    org["teams"][1]["weight"] = 7
    mutate(org)
    before = state()

    message, err = run_failing("apply", write(tmp_path, org, filename))

    path = str(tmp_path / filename)
    assert any(line.startswith(f"{path}: {expected}") for line in err.splitlines()), err
    assert "nothing was written" in message
    assert state() == before


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("syntax_error.json", "syntax_error.json:4:5: invalid JSON: Expecting ',' delimiter"),
        ("syntax_error.yaml", "syntax_error.yaml:7:9: invalid YAML: expected ',' or '}', but got ':'"),
        ("duplicate_key.yaml", "duplicate_key.yaml:5:5: invalid YAML: duplicate key 'slug'"),
    ],
)
def test_syntax_errors_name_file_line_and_column(tmp_path: Path, filename: str, expected: str) -> None:
    path = tmp_path / filename
    shutil.copy(DATA / filename, path)

    message, err = run_failing("apply", str(path))

    assert err.startswith(f"{tmp_path}/{expected}"), err
    assert len(err.splitlines()) == 1
    assert message == f"cannot read {path}; nothing was written."
    assert not Team.objects.exists()


def test_every_error_is_reported_in_one_run() -> None:
    path = DATA / "many_errors.yaml"

    message, err = run_failing("apply", str(path))

    assert err.splitlines() == [
        f"{path}: {line}"
        for line in (
            "teams[0].slug: 'NLP' is not a valid slug: use lowercase letters, digits and single '-' between them "
            "(e.g. nlp or vision-research).",
            "teams[0].weight: must be a positive integer, got 0",
            "teams[0].quotas[0].burst: must be ≥ guaranteed (16)",
            "teams[0].quotas[1].gpu_class: unknown GPU class 'V100'; use one of any, A100, H100, H200",
            "teams[0].members[0].role: must be one of lead, member, got 'owner'",
            "teams[1].colour: unknown key 'colour'; allowed keys: name, slug, namespace, weight, checkpoint_claim, "
            "max_priority, production_kinds, quotas, projects, members, sso_groups",
            "teams[1].slug: required",
            "teams[1].namespace: duplicate namespace 'team-nlp' (also teams[0])",
            "finance: must be a list, got string",
        )
    ]
    assert message == f"9 error(s) in {path}; nothing was written."
    assert state()["teams"] == []


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    message, err = run_failing("apply", str(tmp_path / "nope.yaml"))

    assert err.strip() == f"{tmp_path / 'nope.yaml'}: no such file"
    assert "nothing was written" in message


def test_apply_needs_a_file() -> None:
    with pytest.raises(CommandError, match="file"):
        call_command("teams", "apply", stdout=StringIO(), stderr=StringIO())


# --------------------------------------------------------------------------------- blocked by references


def test_prune_blocked_by_jobs_rolls_back_everything(tmp_path: Path) -> None:
    run("apply", str(DATA / "org.json"))
    JobFactory(team=Team.objects.get(slug="vision"))
    JobFactory(team=Team.objects.get(slug="nlp"), project=Project.objects.get(code="chat"))
    org = shrunk_org()
    org["teams"][0]["weight"] = 9  # an update that must not survive the failed prune
    before = state()

    message, err = run_failing("apply", write(tmp_path, org), "--prune")

    path = tmp_path / "org.json"
    assert err.splitlines() == [
        f"{path}: cannot delete project 'nlp/chat': still referenced by 1 job",
        f"{path}: cannot delete team 'vision': still referenced by 1 job",
    ]
    assert message == f"cannot apply {path}; nothing was written."
    assert state() == before


def test_org_roles_ensure_creates_both_groups_once() -> None:
    org_roles_ensure()
    org_roles_ensure()

    assert sorted(Group.objects.values_list("name", flat=True)) == sorted([FINANCE, PLATFORM_ADMIN])


def test_services_are_callable_without_the_command() -> None:
    """The demo seed's path: validate plain data, apply it, and get an empty result the second time."""
    data = json.loads((DATA / "org.json").read_text())

    first = org_apply(spec=validate_org(data), prune=False)
    second = org_apply(spec=validate_org(data), prune=False)

    assert first.keys("team", "created") == ["nlp", "vision"]
    assert first.keys("project", "created") == ["nlp/llm-pretrain", "nlp/chat", "vision/CC-1042"]
    assert not second.changed and second.as_dict()["changes"] == []


def test_database_rejection_becomes_an_apply_error_and_rolls_back() -> None:
    """A spec built without validate_org (or raced by another writer) still cannot half-apply."""
    TeamFactory(slug="legacy", name="Legacy", namespace="team-x")
    before = state()
    spec = OrgSpec(
        teams=(
            TeamSpec(name="Fresh", slug="fresh", namespace="team-fresh"),
            TeamSpec(name="Clash", slug="clash", namespace="team-x"),  # unique namespace violated
        ),
        finance=("carol",),
    )

    with pytest.raises(OrgApplyError, match="the database rejected the change"):
        org_apply(spec=spec)

    assert state() == before
