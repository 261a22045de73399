"""The cluster view: GPUs and MIG slices drawn by team, free capacity per class and tier, and job names
only for the reader's own teams."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduler.cluster_map import cluster_map
from scheduler.models import Gpu
from tests.portal.fleet import fleet, running_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(team, outsider):
    node = fleet()
    ours = running_job(team, node, name="llama-pretrain", gpu_index=1)
    theirs = running_job(
        outsider.memberships.get().team, node, name="secret-detector", gpu_index=0, mig_profile="3g.40gb", mig_start=4
    )
    return node, ours, theirs


def test_segments_follow_the_mig_layout_and_holders(held, team) -> None:
    _, ours, _ = held
    data = cluster_map(visible_team_ids={team.pk})
    gpu0, gpu1 = data.nodes[0].gpus[:2]
    assert [(s.label, s.start, s.width) for s in gpu0.segments] == [
        ("1g.10gb", 0, 1),
        ("1g.10gb", 1, 1),
        ("2g.20gb", 2, 2),
        ("3g.40gb", 4, 4),
    ]
    slice_holder = gpu0.segments[-1].holder
    assert (slice_holder.team_slug, slice_holder.job_id, slice_holder.job_name) == ("vision", None, "")
    assert gpu1.segments[0].holder.job_id == ours.pk
    assert data.free_gpus == pytest.approx(6 + 4 / 7, abs=0.01)
    assert [(f.gpu_class, f.tier, f.total_gpus) for f in data.free] == [("A100", "reserved", 8.0)]
    everyone = cluster_map(visible_team_ids=None)
    assert everyone.nodes[0].gpus[0].segments[-1].holder.job_name == "secret-detector"


def test_unpartitioned_memory_and_closed_nodes(held) -> None:
    node, _, _ = held
    Gpu.objects.filter(node=node, index=2).update(mig_layout=[["3g.40gb", 0]])
    node.state = "cordoned"
    node.save()
    data = cluster_map(visible_team_ids=set())
    gpu2 = data.nodes[0].gpus[2]
    assert [(s.label, s.partitioned) for s in gpu2.segments] == [("3g.40gb", True), ("not partitioned", False)]
    assert data.free_gpus == 0  # a cordoned node takes no work


def test_cluster_page_draws_the_map(client, held, outsider) -> None:
    client.force_login(outsider)
    body = client.get(reverse("cluster")).content.decode()
    assert "a100-res-01" in body and "grid-row: 5 / span 4" in body
    assert "secret-detector" in body and "llama-pretrain" not in body  # own job named, the other team's not
    assert "every 15s" in body
    partial = client.get(reverse("cluster"), headers={"HX-Request": "true"})
    assert partial.templates[0].name == "scheduler/partials/cluster_map.html"


def test_empty_fleet_says_what_to_do(client, lead) -> None:
    client.force_login(lead)
    assert "No nodes are registered yet" in client.get(reverse("cluster")).content.decode()


def test_each_node_shows_its_fabric(client, held, lead) -> None:
    node, _, _ = held
    assert cluster_map(visible_team_ids=set()).nodes[0].fabric == "TCP only"
    node.fabric, node.fabric_devices, node.placement_group = "efa", 32, "pg-train"
    node.save()
    row = cluster_map(visible_team_ids=set()).nodes[0]
    assert (row.fabric, row.placement_group) == ("EFA × 32", "pg-train")
    client.force_login(lead)
    body = client.get(reverse("cluster")).content.decode()
    assert "EFA × 32" in body and "group pg-train" in body
