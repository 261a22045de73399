"""MIG reconfiguration through the GPU Operator's MIG Manager, against kmock's emulator (``docs/gpu-facts.md``,
MIG Manager reconfiguration flow).

The tests play MIG Manager's part by editing the node's labels the way it does: ``mig.config.state``
``pending`` → ``success``, GFD's ``mig-<profile>.count`` labels, and the ``gpu.deploy.*`` labels it pauses.
"""

from __future__ import annotations

import pytest
import yaml

from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.mig import Step, config_name
from scheduler.gateways.protocol import BindRequest, Device, MigConfigState, ReplicaPlacement
from tests.scheduler.kube_emulator import ManualClock, cluster_fixture, manual_gateway

cluster = pytest.fixture(cluster_fixture)

NODE = "mig-1"
LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
}
TWO_3G = (("3g.40gb", 0), ("3g.40gb", 4))
WANTED = (TWO_3G, ())
TIMEOUT_S = 900.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def gateway(cluster, clock) -> KubeGateway:
    return manual_gateway(cluster, clock, mig_config_timeout_s=TIMEOUT_S)


def _annotations(cluster) -> dict[str, str]:
    return cluster.node(NODE)["metadata"].get("annotations") or {}


def _node(gateway):
    return next(n for n in gateway.observe().nodes if n.name == NODE)


def _mig_manager_reports(cluster, state: str, **labels: str | None) -> None:
    cluster.patch_node(NODE, {"metadata": {"labels": {"nvidia.com/mig.config.state": state, **labels}}})


def _start(cluster, gateway, *, unschedulable: bool = False) -> str:
    cluster.add_node(NODE, LABELS, unschedulable=unschedulable)
    gateway.node_mig_apply(node=NODE, layouts=WANTED)
    return config_name(WANTED)


def test_the_relabel_flow_drains_relabels_and_uncordons_on_success(cluster, gateway, clock) -> None:
    cluster.add_node(NODE, LABELS, allocatable={"nvidia.com/gpu": "2"})
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    gateway.job_bind(
        request=BindRequest(
            job="1", namespace="team-nlp", name="n", image="img", placements=(ReplicaPlacement(0, NODE, (Device(0),)),)
        )
    )
    cluster.add_pod("default", "foreign-gpu", node=NODE, resources={"nvidia.com/gpu": "1"})
    cluster.add_pod("kube-system", "daemon", node=NODE, resources={"cpu": "100m"})  # no GPU: stays

    gateway.node_mig_apply(node=NODE, layouts=WANTED)

    name = config_name(WANTED)
    cm = cluster.core.read_namespaced_config_map("microcosm-mig-config", "gpu-operator")
    document = yaml.safe_load(cm.data["config.yaml"])
    assert document["version"] == "v1"
    assert document["mig-configs"][name] == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1], "mig-enabled": False},
    ]
    assert document["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    raw = cluster.node(NODE)
    assert raw["spec"]["unschedulable"] is True
    assert raw["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"  # not before the drain
    assert _annotations(cluster)["microcosm.io/mig-phase"] == "draining"
    assert cluster.requests("DELETE", "/pods/mc-1-0$") and cluster.requests("POST", "/foreign-gpu/eviction$")
    assert [p["metadata"]["name"] for p in cluster.pods()] == ["daemon"]
    node = _node(gateway)
    assert (node.mig_status.state, node.mig_status.desired, node.schedulable) == ("pending", WANTED, False)

    clock.now += 20
    (event,) = gateway.mig_watch()
    assert (event.step, cluster.node(NODE)["metadata"]["labels"]["nvidia.com/mig.config"]) == (Step.RELABEL, name)

    _mig_manager_reports(cluster, "pending")
    clock.now += 60
    assert gateway.mig_watch() == ()
    _mig_manager_reports(cluster, "success", **{"nvidia.com/mig-3g.40gb.count": "2"})
    clock.now += 60
    (event,) = gateway.mig_watch()

    assert event.step == Step.SUCCEED
    raw = cluster.node(NODE)
    assert raw["spec"]["unschedulable"] is False
    assert "microcosm.io/mig-phase" not in _annotations(cluster)
    node = _node(gateway)
    assert node.mig == WANTED and node.mig_status.state == MigConfigState.SUCCESS and node.schedulable
    cluster.clear_log()
    gateway.node_mig_apply(node=NODE, layouts=WANTED)  # already in place
    assert cluster.requests("PATCH") == [] and cluster.requests("POST") == []


def test_success_is_not_declared_on_the_previous_runs_state(cluster, gateway, clock) -> None:
    _start(cluster, gateway)
    clock.now += 30
    # The label changed, but MIG Manager has not reacted yet: the state still reads the old "success".
    assert gateway.mig_watch() == ()
    assert _node(gateway).mig_status.state == "pending"


def test_asking_again_for_the_layout_being_applied_changes_nothing(cluster, gateway) -> None:
    _start(cluster, gateway)
    cluster.clear_log()

    gateway.node_mig_apply(node=NODE, layouts=WANTED)

    assert cluster.requests("PATCH") == [] and cluster.requests("POST") == []


def test_a_node_stuck_in_pending_is_recovered_per_the_known_wedge(cluster, gateway, clock) -> None:
    name = _start(cluster, gateway)
    cluster.add_pod(
        "gpu-operator", "nvidia-mig-manager-x", node=NODE, resources={}, labels={"app": "nvidia-mig-manager"}
    )
    cluster.add_pod(
        "gpu-operator", "mig-manager-elsewhere", node="other", resources={}, labels={"app": "nvidia-mig-manager"}
    )
    paused = {
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "paused-for-mig-change",
    }
    _mig_manager_reports(cluster, "pending", **paused)

    clock.now += TIMEOUT_S - 1
    assert gateway.mig_watch() == ()
    clock.now += 2
    (event,) = gateway.mig_watch()

    assert event.step == Step.RECOVER
    labels = cluster.node(NODE)["metadata"]["labels"]
    assert {key: labels[key] for key in paused} == dict.fromkeys(paused, "true")
    assert labels["nvidia.com/mig.config"] == name
    assert [p["metadata"]["name"] for p in cluster.pods("gpu-operator")] == ["mig-manager-elsewhere"]
    assert _annotations(cluster)["microcosm.io/mig-recoveries"] == "1"

    # The restarted MIG Manager re-applies the label and succeeds.
    _mig_manager_reports(cluster, "success", **{"nvidia.com/mig-3g.40gb.count": "2"})
    clock.now += 30
    (event,) = gateway.mig_watch()
    assert event.step == Step.SUCCEED and _node(gateway).mig == WANTED


def test_a_wedge_that_survives_its_recoveries_fails_and_the_node_stays_cordoned(cluster, gateway, clock) -> None:
    name = _start(cluster, gateway)
    steps = []
    for _ in range(3):
        _mig_manager_reports(cluster, "pending", **{"nvidia.com/gpu.deploy.dcgm": "paused-for-mig-change"})
        clock.now += TIMEOUT_S + 1
        steps += [event.step for event in gateway.mig_watch()]

    assert steps == [Step.RECOVER, Step.RECOVER, Step.FAIL]
    # No MIG Manager pod to restart: the label was flipped to another value and back.
    history = cluster.handler.objects["v1/nodes", None, NODE].history
    values = [v["metadata"]["labels"]["nvidia.com/mig.config"] for v in history if v is not None]
    assert values.count(f"{name}-flip") == 2 and values[-1] == name
    node = _node(gateway)
    assert node.mig_status.state == MigConfigState.FAILED and not node.schedulable
    assert cluster.node(NODE)["spec"]["unschedulable"] is True
    assert "no success within 900s" in _annotations(cluster)["microcosm.io/mig-reason"]
    assert gateway.mig_watch() == ()  # a failed flow waits for a new request


def test_a_change_that_never_shows_its_instances_times_out(cluster, gateway, clock) -> None:
    _start(cluster, gateway)
    _mig_manager_reports(cluster, "rebooting")
    clock.now += TIMEOUT_S + 1
    assert gateway.mig_watch() == ()  # a reboot doubles the time allowed
    assert _node(gateway).mig_status.state == MigConfigState.REBOOTING

    _mig_manager_reports(cluster, "success")  # but GFD never reports the new instances
    (event,) = gateway.mig_watch()

    assert event.step == Step.FAIL and "state success" in event.detail


def test_mig_manager_failure_is_reported_and_a_retry_restarts_it(cluster, gateway, clock) -> None:
    _start(cluster, gateway)
    cluster.add_pod(
        "gpu-operator", "nvidia-mig-manager-x", node=NODE, resources={}, labels={"app": "nvidia-mig-manager"}
    )
    _mig_manager_reports(cluster, "failed")

    (event,) = gateway.mig_watch()
    assert event.step == Step.FAIL and _node(gateway).mig_status.state == MigConfigState.FAILED

    # Asked again for the same layout: the label already has that value, so only a restart re-applies it.
    gateway.node_mig_apply(node=NODE, layouts=WANTED)
    assert cluster.pods("gpu-operator") == []
    assert _node(gateway).mig_status.state == MigConfigState.PENDING


def test_a_drain_blocked_by_a_disruption_budget_times_out(cluster, gateway, clock) -> None:
    cluster.add_node(NODE, LABELS)
    cluster.add_pod("default", "guarded", node=NODE, resources={"nvidia.com/gpu": "2"})
    cluster.fail("POST", r"/guarded/eviction$", 429, times=100)  # the PodDisruptionBudget says no

    gateway.node_mig_apply(node=NODE, layouts=WANTED)
    clock.now += 60
    assert gateway.mig_watch() == ()
    clock.now += TIMEOUT_S
    (event,) = gateway.mig_watch()

    assert event.step == Step.FAIL and event.detail == "drain timed out with 1 GPU pods left"
    assert cluster.node(NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"


def test_an_admins_cordon_outlives_the_change(cluster, gateway, clock) -> None:
    _start(cluster, gateway, unschedulable=True)
    _mig_manager_reports(cluster, "success", **{"nvidia.com/mig-3g.40gb.count": "2"})

    (event,) = gateway.mig_watch()

    assert event.step == Step.SUCCEED and "not ours" in event.detail
    assert cluster.node(NODE)["spec"]["unschedulable"] is True


def test_moving_instances_without_changing_counts_needs_no_reconfiguration(cluster, gateway) -> None:
    cluster.add_node(
        NODE,
        {
            **LABELS,
            "nvidia.com/gpu.count": "1",
            "nvidia.com/mig.config": "all-1g.10gb",
            "nvidia.com/mig-1g.10gb.count": "7",
        },
    )
    layout = tuple(("1g.10gb", s) for s in range(7))
    assert _node(gateway).mig == (layout,)

    gateway.node_mig_apply(node=NODE, layouts=(layout,))
    assert cluster.requests("PATCH") == []


def test_impossible_requests_are_conflicts(cluster, gateway) -> None:
    cluster.add_node(NODE, LABELS)
    cluster.add_node("no-mig", {**LABELS, "nvidia.com/mig.capable": "false"})

    with pytest.raises(GatewayConflict, match="overlaps"):
        gateway.node_mig_apply(node=NODE, layouts=((("4g.40gb", 0), ("3g.40gb", 0)),))
    with pytest.raises(GatewayConflict, match="has 2 GPUs"):
        gateway.node_mig_apply(node=NODE, layouts=(TWO_3G, TWO_3G, TWO_3G))
    with pytest.raises(GatewayConflict, match="not MIG-capable"):
        gateway.node_mig_apply(node="no-mig", layouts=WANTED)
    with pytest.raises(GatewayConflict, match="not in the cluster"):
        gateway.node_mig_apply(node="gone", layouts=WANTED)
    assert cluster.requests("PATCH") == []
