"""The emulator's LIST and WATCH behave as kube-apiserver's (tests/scheduler/kube_harness/api_server.py)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.scheduler.kube_emulator import cluster_fixture

cluster = pytest.fixture(cluster_fixture)


def _list(cluster, **query: object) -> dict:
    return json.loads(cluster.core.list_node(_preload_content=False, **query).data)


def _watch_lines(cluster, **query: object) -> list[dict]:
    response = cluster.core.list_node(watch=True, _preload_content=False, **query)
    return [json.loads(line) for line in response.data.splitlines() if line.strip()]


def test_versions_grow_and_lists_page_with_continue(cluster) -> None:
    for i in range(5):
        cluster.add_node(f"n{i}", {"pool": "a" if i % 2 else "b"})
    first = _list(cluster, limit=2)
    assert [n["metadata"]["name"] for n in first["items"]] == ["n0", "n1"]
    versions = [int(n["metadata"]["resourceVersion"]) for n in first["items"]]
    assert (
        versions == sorted(versions) and len(set(versions)) == 2 and all(n["metadata"]["uid"] for n in first["items"])
    )
    names = [n["metadata"]["name"] for n in first["items"]]
    token = first["metadata"]["continue"]
    while token:
        page = _list(cluster, limit=2, _continue=token)
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [n["metadata"]["name"] for n in page["items"]]
        token = page["metadata"].get("continue")
    assert names == [f"n{i}" for i in range(5)]
    only_a = _list(cluster, label_selector="pool=a")
    assert [n["metadata"]["name"] for n in only_a["items"]] == ["n1", "n3"]
    by_name = _list(cluster, field_selector="metadata.name=n4")
    assert [n["metadata"]["name"] for n in by_name["items"]] == ["n4"]


def test_a_continue_token_older_than_the_compaction_is_expired(cluster) -> None:
    for i in range(3):
        cluster.add_node(f"n{i}", {})
    token = _list(cluster, limit=1)["metadata"]["continue"]
    cluster.handler.api_server.compact()
    with pytest.raises(ApiException) as refused:
        _list(cluster, limit=1, _continue=token)
    assert refused.value.status == 410
    body = json.loads(refused.value.body)
    assert body["reason"] == "Expired" and "too old to display a consistent list" in body["message"]


def test_watch_replays_from_a_version_then_ends_at_its_timeout_with_a_bookmark(cluster) -> None:
    cluster.add_node("n0", {})
    version = _list(cluster)["metadata"]["resourceVersion"]
    cluster.patch_node("n0", {"metadata": {"labels": {"x": "1"}}})
    cluster.add_node("n1", {})
    cluster.delete_node("n0")
    events = _watch_lines(cluster, resource_version=version, timeout_seconds=1, allow_watch_bookmarks=True)
    changes = [(e["type"], e["object"]["metadata"].get("name")) for e in events if e["type"] != "BOOKMARK"]
    assert changes == [("MODIFIED", "n0"), ("ADDED", "n1"), ("DELETED", "n0")]
    assert events[-1]["type"] == "BOOKMARK"  # the cacher's last word before the timeout: resume from here
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= int(
        events[-2]["object"]["metadata"]["resourceVersion"]
    )


def test_a_watch_from_a_forgotten_version_gets_an_expired_error_event(cluster) -> None:
    cluster.add_node("n0", {})
    version = _list(cluster)["metadata"]["resourceVersion"]
    cluster.patch_node("n0", {"metadata": {"labels": {"x": "1"}}})
    cluster.handler.api_server.forget_history()
    events = _watch_lines(cluster, resource_version=version, timeout_seconds=1)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {version} (")
