"""``manage.py team_namespaces``: each team's Namespace and RoleBindings as YAML, for ``kubectl apply -f -``."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from kubernetes import client

from tests.factories import TeamFactory


def _render(**options: object) -> list[dict]:
    out = io.StringIO()
    call_command("team_namespaces", stdout=out, **options)
    return [d for d in yaml.safe_load_all(out.getvalue()) if d]


def test_each_team_gets_its_labelled_namespace_and_two_role_bindings(team, settings) -> None:
    TeamFactory(name="Vision", slug="cv", namespace="team-cv")
    settings.KUBERNETES = {**settings.KUBERNETES, "pod_security_team_levels": {"nlp": "privileged"}}

    docs = _render()

    namespaces = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "Namespace"}
    assert namespaces["team-cv"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespaces["team-nlp"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespaces["team-nlp"]["microcosm.io/team"] == "nlp"
    bindings = {(d["metadata"]["namespace"], d["roleRef"]["name"]) for d in docs if d["kind"] == "RoleBinding"}
    assert bindings == {(ns, role) for ns in namespaces for role in ("microcosm-team", "microcosm-log-reader")}
    api = client.ApiClient()
    for doc in docs:  # each one is a valid object of the kubernetes client's models, nothing lost
        model = api.deserialize(json.dumps(doc), f"V1{doc['kind']}", "application/json")
        assert api.sanitize_for_serialization(model) == doc


def test_an_org_file_renders_its_teams(db, tmp_path) -> None:
    org = tmp_path / "org.yaml"
    org.write_text("teams:\n  - {name: Speech, slug: asr, namespace: team-asr}\n")

    docs = _render(org=str(org))

    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["team-asr"]


def test_no_team_is_an_error(db) -> None:
    with pytest.raises(CommandError, match="no teams"):
        _render()
