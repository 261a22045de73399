"""The MIG-watch task drives the Kubernetes MIG flow (drain → relabel → success → uncordon; wedge recovery)
through the gateway's maintenance step (scheduler.gateways.protocol.MaintainedGateway), against kmock's emulator."""

from __future__ import annotations

import pytest

from scheduler.gateways import gateway_override
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.mig import config_name
from scheduler.gateways.protocol import MaintainedGateway, MigConfigState, Observation
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.services.mig import cluster_maintain
from scheduler.tasks import mig_watch_task
from tests.scheduler.kube_emulator import MIG_NODE_LABELS, cluster_fixture, manual_gateway

cluster = pytest.fixture(cluster_fixture)

NODE = "mig-1"
LABELS = MIG_NODE_LABELS
WANTED = ((("3g.40gb", 0), ("3g.40gb", 4)), ())
TIMEOUT_S = 900.0


@pytest.fixture
def gateway(cluster, clock) -> KubeGateway:
    return manual_gateway(cluster, clock, mig_config_timeout_s=TIMEOUT_S)


def _labels(cluster) -> dict[str, str]:
    return cluster.node(NODE)["metadata"]["labels"]


def _mig_manager_reports(cluster, state: str, **labels: str) -> None:
    cluster.patch_node(NODE, {"metadata": {"labels": {"nvidia.com/mig.config.state": state, **labels}}})


def test_both_gateways_offer_maintenance(gateway) -> None:
    assert isinstance(gateway, MaintainedGateway)
    assert isinstance(SimulatedFleet(), MaintainedGateway)


def _start_with_a_gpu_pod_to_drain(cluster, gateway) -> None:
    cluster.add_node(NODE, LABELS)
    cluster.add_pod("default", "foreign-gpu", node=NODE, resources={"nvidia.com/gpu": "1"})
    gateway.node_reconfigure(node=NODE, layouts=WANTED)


def test_the_mig_watch_task_relabels_a_drained_node_then_uncordons_it(cluster, gateway, clock) -> None:
    _start_with_a_gpu_pod_to_drain(cluster, gateway)
    assert cluster.node(NODE)["spec"]["unschedulable"] is True
    assert _labels(cluster)["nvidia.com/mig.config"] == "all-disabled"  # drained first, relabelled by the watch

    with gateway_override(gateway):
        clock.now += 120  # drained, and the config has had its propagation delay (MIG_CONFIG_PROPAGATION_S)
        first = mig_watch_task.run()
        assert first["steps"] == [{"node": NODE, "step": "relabel", "detail": first["steps"][0]["detail"]}]
        assert first["pending"] == [NODE] and first["stuck"] == []
        assert _labels(cluster)["nvidia.com/mig.config"] == config_name(WANTED)

        clock.now += 15
        assert mig_watch_task.run() == {"pending": [NODE], "stuck": [], "steps": []}  # MIG Manager at work

        _mig_manager_reports(cluster, "success", **{"nvidia.com/mig-3g.40gb.count": "2"})
        clock.now += 15
        done = mig_watch_task.run()

    assert done == {
        "pending": [],
        "stuck": [],
        "steps": [{"node": NODE, "step": "succeed", "detail": "live; uncordoned"}],
    }
    assert cluster.node(NODE)["spec"]["unschedulable"] is False
    node = next(n for n in gateway.observe().nodes if n.name == NODE)
    assert node.mig == WANTED and node.mig_status.state == MigConfigState.SUCCESS and node.schedulable


def test_the_mig_watch_task_recovers_a_node_stuck_in_pending(cluster, gateway, clock) -> None:
    _start_with_a_gpu_pod_to_drain(cluster, gateway)
    paused = {"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change"}
    with gateway_override(gateway):
        clock.now += 120  # drained, and the config has had its propagation delay
        assert [s["step"] for s in mig_watch_task.run()["steps"]] == ["relabel"]
        _mig_manager_reports(cluster, "pending", **paused)
        clock.now += TIMEOUT_S + 1
        report = mig_watch_task.run()

    assert [s["step"] for s in report["steps"]] == ["recover"]
    assert "restored 1 deploy labels" in report["steps"][0]["detail"]
    assert _labels(cluster)["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert report["pending"] == [NODE]


class _ObserveOnly:
    """A gateway without maintenance: cluster_maintain only observes it."""

    name = "observe-only"

    def __init__(self, inner: KubeGateway) -> None:
        self.inner = inner
        self.observed = 0

    def observe(self) -> Observation:
        self.observed += 1
        return self.inner.observe()


def test_a_gateway_without_maintenance_is_only_observed(cluster, gateway, clock) -> None:
    _start_with_a_gpu_pod_to_drain(cluster, gateway)
    plain = _ObserveOnly(gateway)
    assert not isinstance(plain, MaintainedGateway)
    clock.now += 15

    report = cluster_maintain(gateway=plain, stuck_after_s=TIMEOUT_S)  # type: ignore[arg-type]

    assert report == {"pending": [NODE], "stuck": [], "steps": []} and plain.observed == 1
    assert _labels(cluster)["nvidia.com/mig.config"] == "all-disabled"  # nobody drove the flow
