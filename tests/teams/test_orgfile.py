"""Loading and validating organisation files (``teams.orgfile``), without the command around them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from teams.errors import OrgFileError, OrgValidationError
from teams.orgfile import MemberSpec, OrgSpec, ProjectSpec, QuotaSpec, TeamSpec, load_org_file, validate_org
from tests.factories import TeamFactory

DATA = Path(__file__).parent / "data"


def errors_of(data: object) -> list[str]:
    with pytest.raises(OrgValidationError) as exc_info:
        validate_org(data)
    return exc_info.value.errors


def team(**overrides: Any) -> dict[str, Any]:
    return {"name": "Language Models", "slug": "nlp", "namespace": "team-nlp", **overrides}


# ----------------------------------------------------------------------------------------------- loading


def test_json_and_yaml_examples_load_to_the_same_data() -> None:
    from_json = load_org_file(DATA / "org.json")

    assert from_json == load_org_file(DATA / "org.yaml")
    # JSON fractions arrive as Decimal so 4.125 GPUs stay exactly 4.125.
    assert from_json["teams"][1]["quotas"][0]["burst"] == Decimal("4.125")


@pytest.mark.parametrize(
    ("name", "text", "message", "line"),
    [
        ("a.json", '{"teams": [}', "invalid JSON: Expecting value", 1),
        ("a.json", '{"teams": [],\n "teams": []}', "invalid JSON: duplicate key 'teams'", None),
        ("a.json", '{"teams": [{"weight": NaN}]}', "invalid JSON: NaN is not a number", 1),
        ("a.yaml", "teams:\n  - slug: nlp\n   name: x\n", "invalid YAML:", 3),
        ("a.yml", "teams: [1, 2\n", "invalid YAML:", 2),
        ("a.yaml", "", "file is empty", None),
        ("a.yaml", "- nlp\n", "top level must be an object with 'teams', got list", None),
        ("a.json", '"teams"', "top level must be an object with 'teams', got string", None),
        ("a.toml", "teams = []", "unsupported file type; use .json, .yaml or .yml", None),
    ],
)
def test_unreadable_files_raise_org_file_error(
    tmp_path: Path, name: str, text: str, message: str, line: int | None
) -> None:
    path = tmp_path / name
    path.write_text(text)

    with pytest.raises(OrgFileError) as exc_info:
        load_org_file(path)

    assert message in exc_info.value.message
    assert exc_info.value.line == line
    assert str(exc_info.value).startswith(f"{path}:")


def test_missing_file_raises_org_file_error(tmp_path: Path) -> None:
    with pytest.raises(OrgFileError, match="no such file"):
        load_org_file(tmp_path / "org.json")


def test_yaml_tags_that_build_objects_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "org.yaml"
    path.write_text("teams: !!python/object/apply:os.system ['true']\n")

    with pytest.raises(OrgFileError, match="invalid YAML"):
        load_org_file(path)


# -------------------------------------------------------------------------------------------- validation


@pytest.mark.django_db
def test_valid_data_becomes_a_frozen_spec() -> None:
    spec = validate_org(load_org_file(DATA / "org.yaml"))

    nlp, vision = spec.teams
    assert nlp == TeamSpec(
        name="Language Models",
        slug="nlp",
        namespace="team-nlp",
        weight=2,
        max_priority="production",
        production_kinds=("inference",),
        quotas=(QuotaSpec("any", Decimal(16), Decimal(32)), QuotaSpec("H100", Decimal(8), Decimal(16))),
        projects=(ProjectSpec("llm-pretrain", "LLM pretraining"), ProjectSpec("chat", "")),
        members=(MemberSpec("alice", "lead"), MemberSpec("bob", "member")),
    )
    assert vision.weight == 1
    assert vision.quotas == (QuotaSpec("A100", Decimal("2.5"), Decimal("4.125")),)
    assert spec.finance == ("carol",) and spec.platform_admins == ("dave",)
    with pytest.raises(AttributeError):
        spec.teams = ()  # type: ignore[misc]


@pytest.mark.django_db
def test_absent_keys_are_unmanaged_and_empty_lists_are_none() -> None:
    assert validate_org({}) == OrgSpec(teams=None, finance=None, platform_admins=None)
    spec = validate_org({"teams": [team(quotas=[], members=[])], "finance": []})

    assert spec.teams == (TeamSpec("Language Models", "nlp", "team-nlp", 1, quotas=(), projects=None, members=()),)
    assert spec.finance == () and spec.platform_admins is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "accepted"),
    [("nlp-scratch", "nlp-scratch"), ("ckpt.v2", "ckpt.v2"), ("", ""), ("Scratch", None), ("a_b", None), (3, None)],
)
def test_checkpoint_claim_is_optional_and_a_kubernetes_name(value: object, accepted: str | None) -> None:
    assert validate_org({"teams": [team()]}).teams[0].checkpoint_claim is None  # absent: not managed
    data = {"teams": [team(checkpoint_claim=value)]}
    if accepted is None:
        (error,) = errors_of(data)
        assert error.startswith("teams[0].checkpoint_claim: ")
        assert "must be a string" in error or "is not a valid volume claim name" in error
    else:
        assert validate_org(data).teams[0].checkpoint_claim == accepted


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "accepted"),
    [("production", "production"), ("high", "high"), ("low", "low"), ("urgent", None), ("", None), (1, None)],
)
def test_max_priority_is_optional_and_a_priority(value: object, accepted: str | None) -> None:
    assert validate_org({"teams": [team()]}).teams[0].max_priority is None  # absent: not managed
    data = {"teams": [team(max_priority=value)]}
    if accepted is None:
        (error,) = errors_of(data)
        assert error.startswith("teams[0].max_priority: must be one of production, high, normal, low (highest first)")
    else:
        assert validate_org(data).teams[0].max_priority == accepted


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "accepted", "where"),
    [
        (["inference"], ("inference",), ""),
        (["inference", "training"], ("training", "inference"), ""),  # the vocabulary's order, one way stored
        (["batch", "training", "inference"], ("training", "inference", "batch"), ""),
        ([], None, "teams[0].production_kinds: must be a non-empty list of job kinds"),
        ("inference", None, "teams[0].production_kinds: must be a non-empty list of job kinds"),
        (["serving"], None, "teams[0].production_kinds[0]: must be a job kind (training, inference, batch)"),
        (["inference", "inference"], None, "teams[0].production_kinds[1]: duplicate job kind 'inference'"),
    ],
)
def test_production_kinds_is_optional_and_a_list_of_job_kinds(
    value: object, accepted: tuple[str, ...] | None, where: str
) -> None:
    assert validate_org({"teams": [team()]}).teams[0].production_kinds is None  # absent: not managed
    data = {"teams": [team(max_priority="production", production_kinds=value)]}
    if accepted is None:
        (error,) = errors_of(data)
        assert error.startswith(where), error
    else:
        assert validate_org(data).teams[0].production_kinds == accepted


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("weight", "accepted"),
    [(1, 1), (2.0, 2), (Decimal("3"), 3), (0, None), (-1, None), (1.5, None), ("2", None), (True, None), (None, None)],
)
def test_weight_is_a_positive_integer(weight: object, accepted: int | None) -> None:
    data = {"teams": [team(weight=weight)]}
    if accepted is None:
        assert errors_of(data)[0].startswith("teams[0].weight: must be a positive integer, got ")
    else:
        assert validate_org(data).teams[0].weight == accepted


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, None),
        (0.5, None),
        (Decimal("0.125"), None),
        (0.1234, "must have at most 3 decimal places, got 0.1234"),
        (-0.5, "must be a non-negative number, got -0.5"),
        (False, "must be a non-negative number, got boolean"),
        ("4", "must be a non-negative number, got string '4'"),
        (float("inf"), "must be a non-negative number, got inf"),
        (1_000_000, "must be less than 1000000, got 1000000"),
    ],
)
def test_quota_amounts(value: object, error: str | None) -> None:
    data = {"teams": [team(quotas=[{"gpu_class": "any", "guaranteed": value, "burst": 999_999}])]}
    if error is None:
        assert validate_org(data).teams[0].quotas[0].guaranteed == Decimal(str(value))
    else:
        assert errors_of(data) == [f"teams[0].quotas[0].guaranteed: {error}"]


@pytest.mark.django_db
def test_quota_fields_are_required() -> None:
    assert errors_of({"teams": [team(quotas=[{"gpu_class": "any"}, {}])]}) == [
        "teams[0].quotas[0].guaranteed: required",
        "teams[0].quotas[0].burst: required",
        "teams[0].quotas[1].gpu_class: required",
        "teams[0].quotas[1].guaranteed: required",
        "teams[0].quotas[1].burst: required",
    ]


@pytest.mark.django_db
def test_shapes_and_strings() -> None:
    errors = errors_of(
        {
            "teams": [
                "nlp",
                {"name": "", "slug": 7, "namespace": "x" * 64, "projects": {"code": "a"}, "members": [["alice"]]},
                team(name="N" * 101, projects=[{"code": "-bad"}, {"name": "no code"}], members=[{"role": "lead"}]),
            ],
            "platform_admins": ["dave", "dave", ""],
        }
    )

    assert errors == [
        "teams[0]: must be an object, got string",
        "teams[1].name: must not be empty",
        "teams[1].slug: must be a string, got number",
        "teams[1].namespace: must be at most 63 characters (got 64)",
        "teams[1].projects: must be a list, got object",
        "teams[1].members[0]: must be an object, got list",
        "teams[2].name: must be at most 100 characters (got 101)",
        "teams[2].projects[0].code: '-bad' is not a valid chargeback code: use letters, digits, '.', '_' and '-', "
        "starting with a letter or digit (e.g. llm-pretrain or CC-1042).",
        "teams[2].projects[1].code: required",
        "teams[2].members[0].username: required",
        "platform_admins[1]: duplicate username 'dave'",
        "platform_admins[2]: must not be empty",
    ]


@pytest.mark.django_db
def test_duplicates_across_teams_are_reported_even_when_a_team_has_other_errors() -> None:
    errors = errors_of(
        {"teams": [team(), team(weight=0), team(slug="other", name="Other", namespace="team-other", weight="x")]}
    )

    assert errors == [
        "teams[1].weight: must be a positive integer, got 0",
        "teams[2].weight: must be a positive integer, got string 'x'",
        "teams[1].slug: duplicate slug 'nlp' (also teams[0])",
        "teams[1].name: duplicate name 'Language Models' (also teams[0])",
        "teams[1].namespace: duplicate namespace 'team-nlp' (also teams[0])",
    ]


@pytest.mark.django_db
def test_names_and_namespaces_held_by_other_teams_in_the_database_are_errors() -> None:
    TeamFactory(slug="nlp", name="Language Models", namespace="team-nlp")  # the same team: fine
    TeamFactory(slug="legacy", name="Vision", namespace="team-legacy")

    errors = errors_of({"teams": [team(), team(slug="vision", name="Vision", namespace="team-legacy")]})

    assert errors == [
        "teams[1].name: 'Vision' is already used by existing team 'legacy'; free it in an earlier apply first",
        "teams[1].namespace: 'team-legacy' is already used by existing team 'legacy'; free it in an earlier apply "
        "first",
    ]


def test_top_level_must_be_an_object() -> None:
    assert errors_of(["teams"]) == ["(top level): must be an object with 'teams', got list"]
