"""cluster_sync: the inventory made to match an observation, and the snapshot built from the rows it leaves."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import build
from scheduler.core.model.vocabulary import Fabric
from scheduler.gateways.protocol import NodeObservation, Observation
from scheduler.models import Node
from scheduler.services.sync import cluster_sync
from tests.scheduler.loop_helpers import fleet

pytestmark = pytest.mark.django_db


def test_cluster_sync_registers_unknown_nodes_and_skips_impossible_ones(team, clock):
    observed = fleet(clock).observe()
    extra = NodeObservation(
        name="h100-new-1",
        gpu_model="H100-SXM5-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        tier="on-demand",
        price_per_gpu_hour=None,
    )
    alien = NodeObservation(name="t4-1", gpu_model="Tesla-T4", gpu_count=1, interconnect="pcie", tier="spot")
    report = cluster_sync(
        observation=Observation(observed_at=observed.observed_at, nodes=(*observed.nodes, extra, alien), jobs={})
    )
    assert Node.objects.get(name="h100-new-1").gpus.count() == 8
    assert Node.objects.get(name="h100-new-1").price_per_gpu_hour == 0  # unknown price: set it in the admin
    assert report.skipped and report.skipped[0].startswith("t4-1: unknown GPU model 'Tesla-T4'")
    assert not Node.objects.filter(name="t4-1").exists()


def test_cluster_sync_records_the_observed_fabric_and_the_snapshot_passes_it_to_the_engine(team, clock):
    observed = fleet(clock).observe()
    efa = NodeObservation(
        name="h100-efa-1",
        gpu_model="H100-SXM5-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        tier="on-demand",
        fabric="efa",
        fabric_devices=32,
        placement_group="pg-a",
    )
    bad = NodeObservation(
        name="h100-bad-1", gpu_model="H100-SXM5-80GB", gpu_count=8, interconnect="nvswitch", tier="spot"
    )
    bad = dataclasses.replace(bad, fabric_devices=2)
    observation = Observation(observed_at=observed.observed_at, nodes=(*observed.nodes, efa, bad), jobs={})
    report = cluster_sync(observation=observation)
    row = Node.objects.get(name="h100-efa-1")
    assert (row.fabric, row.fabric_devices, row.placement_group) == ("efa", 32, "pg-a")
    assert any(s.startswith("h100-bad-1: a node without a fabric (tcp) has no fabric devices") for s in report.skipped)
    built = build(observation, policy_current(), clock.now.timestamp())
    engine = {n.name: n for n in built.snapshot.nodes}
    assert (engine["h100-efa-1"].fabric, engine["h100-efa-1"].placement_group) == (Fabric.EFA, "pg-a")
    assert engine["a100-res-1"].fabric == Fabric.TCP


def test_cluster_sync_keeps_an_admins_cordon(team, clock):
    Node.objects.filter(name="a100-res-1").update(state="cordoned")
    cluster_sync(observation=fleet(clock).observe())
    assert Node.objects.get(name="a100-res-1").state == "cordoned"
    built = build(fleet(clock).observe(), policy_current(), clock.now.timestamp())
    assert {n.name: n.schedulable for n in built.snapshot.nodes}["a100-res-1"] is False
