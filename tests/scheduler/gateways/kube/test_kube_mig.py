"""MIG reconfiguration through the GPU Operator's MIG Manager, against kmock's emulator (``docs/gpu-facts.md``,
MIG Manager reconfiguration flow).

The first tests play MIG Manager's part by editing the node's labels the way it does: ``mig.config.state``
``pending`` → ``success``, GFD's ``mig-<profile>.count`` labels, and the ``gpu.deploy.*`` labels it pauses. The
ones after "With the harness" run the modelled MIG Manager and device plugin (``tests/scheduler/kube_harness/``):
the config reaches MIG Manager only after the kubelet's propagation delay, and the device plugin, not Microcosm,
decides which GPU a pod holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scheduler.core.gpus.catalog import GPU_MODELS
from scheduler.core.sizing.layouts import named_layouts
from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.mig import DEVICE_FILTERS, Step, config_name, operator_configs
from scheduler.gateways.kube.mig_drain import pod_in_the_way, resources_in_the_way
from scheduler.gateways.protocol import BindRequest, Device, MigConfigState, ReplicaPlacement
from tests.scheduler.kube_emulator import MIG_NODE_LABELS, cluster_fixture, manual_gateway
from tests.scheduler.kube_harness.device_plugin import DevicePlugin
from tests.scheduler.kube_harness.mig_manager import MigManagers

cluster = pytest.fixture(cluster_fixture)

NODE = "mig-1"
LABELS = MIG_NODE_LABELS
TWO_3G = (("3g.40gb", 0), ("3g.40gb", 4))
WANTED = (TWO_3G, ())
TIMEOUT_S = 900.0
PROPAGATION_S = 120.0  # the gateway's default MIG_CONFIG_PROPAGATION_S


@pytest.fixture
def gateway(cluster, clock) -> KubeGateway:
    return manual_gateway(cluster, clock, mig_config_timeout_s=TIMEOUT_S)


def _annotations(cluster) -> dict[str, str]:
    return cluster.node(NODE)["metadata"].get("annotations") or {}


def _node(gateway):
    return next(n for n in gateway.observe().nodes if n.name == NODE)


def _mig_manager_reports(cluster, state: str, **labels: str | None) -> None:
    cluster.patch_node(NODE, {"metadata": {"labels": {"nvidia.com/mig.config.state": state, **labels}}})


def _start(cluster, gateway, clock, *, unschedulable: bool = False) -> str:
    """A change requested on an idle node, relabelled once the config has had time to reach MIG Manager."""
    cluster.add_node(NODE, LABELS, unschedulable=unschedulable)
    gateway.node_reconfigure(node=NODE, layouts=WANTED)
    assert cluster.node(NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"  # not yet visible
    clock.now += PROPAGATION_S
    (event,) = gateway.mig_watch()
    assert event.step == Step.RELABEL
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

    gateway.node_reconfigure(node=NODE, layouts=WANTED)

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
    assert gateway.mig_watch() == ()  # drained, but MIG Manager's mounted config may not hold the name yet
    clock.now += PROPAGATION_S - 20
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
    gateway.node_reconfigure(node=NODE, layouts=WANTED)  # already in place
    assert cluster.requests("PATCH") == [] and cluster.requests("POST") == []


def test_success_is_not_declared_on_the_previous_runs_state(cluster, gateway, clock) -> None:
    _start(cluster, gateway, clock)
    clock.now += 30
    # The label changed, but MIG Manager has not reacted yet: the state still reads the old "success".
    assert gateway.mig_watch() == ()
    assert _node(gateway).mig_status.state == "pending"


def test_asking_again_for_the_layout_being_applied_changes_nothing(cluster, gateway, clock) -> None:
    _start(cluster, gateway, clock)
    cluster.clear_log()

    gateway.node_reconfigure(node=NODE, layouts=WANTED)

    assert cluster.requests("PATCH") == [] and cluster.requests("POST") == []


def test_a_node_stuck_in_pending_is_recovered_per_the_known_wedge(cluster, gateway, clock) -> None:
    name = _start(cluster, gateway, clock)
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
    name = _start(cluster, gateway, clock)
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
    _start(cluster, gateway, clock)
    _mig_manager_reports(cluster, "rebooting")
    clock.now += TIMEOUT_S + 1
    assert gateway.mig_watch() == ()  # a reboot doubles the time allowed
    assert _node(gateway).mig_status.state == MigConfigState.REBOOTING

    _mig_manager_reports(cluster, "success")  # but GFD never reports the new instances
    (event,) = gateway.mig_watch()

    assert event.step == Step.FAIL and "state success" in event.detail


def test_mig_manager_failure_is_reported_and_a_retry_restarts_it(cluster, gateway, clock) -> None:
    _start(cluster, gateway, clock)
    cluster.add_pod(
        "gpu-operator", "nvidia-mig-manager-x", node=NODE, resources={}, labels={"app": "nvidia-mig-manager"}
    )
    _mig_manager_reports(cluster, "failed")

    # Soon after a fresh config write: retried once, after another propagation delay (a restart: same label).
    (event,) = gateway.mig_watch()
    assert event.step == Step.RETRY and _node(gateway).mig_status.state == MigConfigState.PENDING
    clock.now += PROPAGATION_S
    (event,) = gateway.mig_watch()
    assert event.step == Step.RELABEL and cluster.pods("gpu-operator") == []
    _mig_manager_reports(cluster, "failed")
    (event,) = gateway.mig_watch()
    assert event.step == Step.FAIL and _node(gateway).mig_status.state == MigConfigState.FAILED

    cluster.add_pod(
        "gpu-operator", "nvidia-mig-manager-y", node=NODE, resources={}, labels={"app": "nvidia-mig-manager"}
    )

    # Asked again for the same layout: the label already has that value, so only a restart re-applies it.
    gateway.node_reconfigure(node=NODE, layouts=WANTED)
    assert cluster.pods("gpu-operator") == []
    assert _node(gateway).mig_status.state == MigConfigState.PENDING


def test_a_drain_blocked_by_a_disruption_budget_times_out(cluster, gateway, clock) -> None:
    cluster.add_node(NODE, LABELS)
    cluster.add_pod("default", "guarded", node=NODE, resources={"nvidia.com/gpu": "2"})
    cluster.fail("POST", r"/guarded/eviction$", 429, times=100)  # the PodDisruptionBudget says no

    gateway.node_reconfigure(node=NODE, layouts=WANTED)
    clock.now += 60
    assert gateway.mig_watch() == ()
    clock.now += TIMEOUT_S
    (event,) = gateway.mig_watch()

    assert event.step == Step.FAIL and event.detail == "drain timed out with 1 GPU pods left"
    assert cluster.node(NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"


def test_an_admins_cordon_outlives_the_change(cluster, gateway, clock) -> None:
    _start(cluster, gateway, clock, unschedulable=True)
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

    gateway.node_reconfigure(node=NODE, layouts=(layout,))
    assert cluster.requests("PATCH") == []


def test_impossible_requests_are_conflicts(cluster, gateway) -> None:
    cluster.add_node(NODE, LABELS)
    cluster.add_node("no-mig", {**LABELS, "nvidia.com/mig.capable": "false"})

    with pytest.raises(GatewayConflict, match="overlaps"):
        gateway.node_reconfigure(node=NODE, layouts=((("4g.40gb", 0), ("3g.40gb", 0)),))
    with pytest.raises(GatewayConflict, match="has 2 GPUs"):
        gateway.node_reconfigure(node=NODE, layouts=(TWO_3G, TWO_3G, TWO_3G))
    with pytest.raises(GatewayConflict, match="not MIG-capable"):
        gateway.node_reconfigure(node="no-mig", layouts=WANTED)
    with pytest.raises(GatewayConflict, match="not in the cluster"):
        gateway.node_reconfigure(node="gone", layouts=WANTED)
    assert cluster.requests("PATCH") == []


# -- With the harness: the modelled MIG Manager and device plugin (tests/scheduler/kube_harness/) -----------------

UPSTREAM_CONFIG = Path(__file__).resolve().parents[2] / "kube_harness" / "default_mig_parted_config.yaml"


@pytest.fixture
def plugin(cluster) -> DevicePlugin:
    plugin = DevicePlugin(cluster.handler)
    cluster.handler.bind_hooks.append(plugin.on_bind)
    return plugin


@pytest.fixture
def managers(cluster, plugin) -> MigManagers:
    return MigManagers(cluster, plugin)


def _run(gateway, managers: MigManagers, clock, seconds: float, every: float = 15.0) -> list[Step]:
    """The worker's maintenance beat and the node's components, side by side, for ``seconds``."""
    steps = []
    for _ in range(int(seconds // every)):
        clock.now += every
        steps += [event.step for event in gateway.mig_watch()]
        managers.step(clock.now)
    return steps


def test_the_label_moves_only_once_mig_manager_can_see_the_config(cluster, gateway, clock, managers) -> None:
    cluster.add_node(NODE, LABELS)
    managers.add(NODE, [(), ()], now=clock.now)

    gateway.node_reconfigure(node=NODE, layouts=WANTED)
    managers.step(clock.now)
    steps = _run(gateway, managers, clock, 300)

    assert managers.managers[NODE].runs == [f"{config_name(WANTED)}: success (applied)"]
    assert steps == [Step.RELABEL, Step.SUCCEED]
    node = _node(gateway)
    assert node.mig == WANTED and node.mig_status.state == MigConfigState.SUCCESS and node.schedulable


def test_a_slower_kubelet_than_the_setting_costs_one_retry_not_the_node(cluster, gateway, clock, plugin) -> None:
    managers = MigManagers(cluster, plugin, propagation_s=PROPAGATION_S + 30)  # e.g. --sync-frequency raised
    cluster.add_node(NODE, LABELS)
    managers.add(NODE, [(), ()], now=clock.now)

    gateway.node_reconfigure(node=NODE, layouts=WANTED)
    managers.step(clock.now)
    steps = _run(gateway, managers, clock, 600)

    assert [run.split(" ")[1] for run in managers.managers[NODE].runs] == ["failed", "success"]
    assert steps == [Step.RELABEL, Step.RETRY, Step.RELABEL, Step.SUCCEED]
    assert _node(gateway).mig == WANTED


def test_cutting_over_to_microcosms_config_keeps_nodes_on_operator_names(cluster, gateway, clock, managers) -> None:
    cluster.add_node(NODE, {**LABELS, "nvidia.com/mig.config": "all-3g.40gb", "nvidia.com/mig-3g.40gb.count": "4"})
    cluster.add_node(
        "mig-2",
        {
            **LABELS,
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/mig-1g.10gb.count": "2",
            "nvidia.com/mig-2g.20gb.count": "1",
            "nvidia.com/mig-3g.40gb.count": "1",
        },
    )
    managers.add(NODE, [("3g.40gb", "3g.40gb")] * 2, now=clock.now)
    managers.add("mig-2", [("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")], now=clock.now)

    gateway.mig_watch()  # the worker writes its ConfigMap with the operator's names before any change
    managers.step(clock.now)
    clock.now += PROPAGATION_S  # docs/deploy.md: wait out the propagation, then point ClusterPolicy at it
    managers.step(clock.now)
    for name in (NODE, "mig-2"):  # the DaemonSet rolls: each new pod re-applies its node's label
        cluster.core.delete_namespaced_pod(f"nvidia-mig-manager-{name}", "gpu-operator")
    managers.step(clock.now)

    for name in (NODE, "mig-2"):
        labels = cluster.node(name)["metadata"]["labels"]
        assert labels["nvidia.com/mig.config.state"] == "success", managers.managers[name].runs
    assert managers.managers[NODE].runs == ["all-3g.40gb: success (already applied)"]


def test_the_operator_names_match_the_gpu_operators_default_config() -> None:
    """On every GPU the catalog knows (each PCI ID of its family), each ``all-*`` name gives the counts the
    operator's own default ConfigMap gives there (device-filter resolved), and no operator name for it is missing."""
    upstream = yaml.safe_load(UPSTREAM_CONFIG.read_text())["mig-configs"]
    ours = operator_configs()
    for spec in GPU_MODELS:
        if spec.mig_family is None:
            continue
        profiles = set(spec.profiles())
        for device_id in DEVICE_FILTERS[spec.mig_family]:

            def on_gpu(entries: list, device_id: str = device_id) -> tuple[str, ...]:
                return MigManagers._resolve(entries, device_id, [("untouched",)])[0]

            for name in named_layouts(spec.name):
                theirs = on_gpu(upstream[name])
                # Upstream's static file leaves a few PCI IDs out of a filter (all-1g.35gb: H200 SXM only, not
                # H200 NVL); there the name means what MIG Manager's generated config would make of it.
                if theirs != ("untouched",):
                    assert on_gpu(ours[name]) == theirs, (spec.name, device_id, name)
            for name, entries in upstream.items():
                result = on_gpu(entries)
                if result != ("untouched",) and set(result) <= profiles:
                    assert name in ours, (spec.name, device_id, name)


def test_the_drain_goes_by_what_the_device_plugin_assigned(cluster, gateway, clock, managers, plugin) -> None:
    cluster.add_node(NODE, LABELS, allocatable={"nvidia.com/gpu": "2"})
    managers.add(NODE, [(), ()], now=clock.now)
    gateway.namespace_ensure(namespace="team-nlp", team="nlp")
    # Microcosm means GPU 1 (its microcosm.io/devices annotation); the pod asks for one nvidia.com/gpu and the
    # device plugin hands it the first free one: GPU 0, the GPU that is about to change.
    gateway.job_bind(
        request=BindRequest(
            job="1", namespace="team-nlp", name="n", image="img", placements=(ReplicaPlacement(0, NODE, (Device(1),)),)
        )
    )
    (held,) = plugin.assigned.values()
    assert [d.gpu for d in held[1]] == [0]

    gateway.node_reconfigure(node=NODE, layouts=WANTED)  # GPU 0 → 2 × 3g, GPU 1 stays whole
    managers.step(clock.now)
    _run(gateway, managers, clock, 300)

    assert cluster.requests("DELETE", "/pods/mc-1-0$")
    assert managers.managers[NODE].runs == [f"{config_name(WANTED)}: success (applied)"]
    assert _node(gateway).mig == WANTED


def test_with_reboot_a_mode_change_drains_the_whole_node_first(cluster, clock, plugin) -> None:
    gateway = KubeGateway(
        cluster.new_api_client(),
        clock=clock,
        sleep=lambda _s: None,
        mig_config_timeout_s=TIMEOUT_S,
        mig_with_reboot=True,
        request_timeout_s=2,
    )
    managers = MigManagers(cluster, plugin, with_reboot=True, reset_blocked=True)  # a cloud VM
    cluster.add_node(NODE, {**LABELS, "nvidia.com/mig-1g.10gb.count": "7"})
    managers.add(NODE, [("1g.10gb",) * 7, ()], now=clock.now)
    cluster.add_pod("default", "small", node=NODE, resources={"nvidia.com/mig-1g.10gb": "1"})  # on GPU 0
    managers.step(clock.now)
    seven = tuple(("1g.10gb", s) for s in range(7))
    assert _node(gateway).mig == (seven, ())

    gateway.node_reconfigure(node=NODE, layouts=(seven, TWO_3G))  # GPU 1 turns MIG on: a mode change
    managers.step(clock.now)
    _run(gateway, managers, clock, 600)

    # Evicted (its disruption budget asked) before the relabel, not killed by the reboot.
    assert cluster.requests("POST", "/small/eviction$")
    assert managers.managers[NODE].runs[-1].endswith("success (applied)")
    assert _node(gateway).mig == (seven, TWO_3G)


def test_a_config_written_long_ago_needs_no_wait(cluster, gateway, clock, managers) -> None:
    cluster.add_node(NODE, LABELS)
    managers.add(NODE, [(), ()], now=clock.now)
    other = ((), TWO_3G)
    for layouts in (WANTED, other):
        gateway.node_reconfigure(node=NODE, layouts=layouts)
        managers.step(clock.now)
        _run(gateway, managers, clock, 300)
        assert _node(gateway).mig == layouts

    gateway.node_reconfigure(node=NODE, layouts=WANTED)  # its config has been in the ConfigMap for 10 minutes

    assert cluster.node(NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == config_name(WANTED)
    managers.step(clock.now)
    assert _run(gateway, managers, clock, 30) == [Step.SUCCEED]


def test_without_mig_with_reboot_a_reboot_kills_the_pods_the_drain_kept(cluster, gateway, clock, plugin) -> None:
    """Why ``MIG_WITH_REBOOT`` exists: MIG Manager with ``WITH_REBOOT=true`` on a VM whose GPU reset cannot change
    the MIG mode reboots the node, and the pod the drain rightly kept (its GPU does not change) dies with it."""
    managers = MigManagers(cluster, plugin, with_reboot=True, reset_blocked=True)
    cluster.add_node(NODE, {**LABELS, "nvidia.com/mig-1g.10gb.count": "7"})
    managers.add(NODE, [("1g.10gb",) * 7, ()], now=clock.now)
    cluster.add_pod("default", "small", node=NODE, resources={"nvidia.com/mig-1g.10gb": "1"})
    managers.step(clock.now)
    seven = tuple(("1g.10gb", s) for s in range(7))

    gateway.node_reconfigure(node=NODE, layouts=(seven, TWO_3G))
    managers.step(clock.now)
    _run(gateway, managers, clock, 600)

    assert not cluster.requests("POST", "/small/eviction$")
    assert "rebooting" in managers.managers[NODE].runs[0]
    assert "small" not in [p["metadata"]["name"] for p in cluster.pods("default")]
    assert _node(gateway).mig == (seven, TWO_3G)


def test_a_drain_takes_every_type_a_changing_gpu_offers() -> None:
    seven = tuple(("1g.10gb", s) for s in range(7))
    assert resources_in_the_way(((), ()), (TWO_3G, ())) == {"nvidia.com/gpu"}  # both whole: either may hold it
    assert resources_in_the_way((TWO_3G, seven), (TWO_3G, ())) == {"nvidia.com/mig-1g.10gb"}
    assert resources_in_the_way((TWO_3G, ()), (TWO_3G, seven)) == {"nvidia.com/gpu"}
    # With WITH_REBOOT, a mode change may reboot the node: everything goes.
    assert resources_in_the_way((TWO_3G, ()), (TWO_3G, seven), with_reboot=True) == {
        "nvidia.com/gpu",
        "nvidia.com/mig-3g.40gb",
    }
    # Same mode, other instances: no reboot, so only the changing GPU's types.
    assert resources_in_the_way((TWO_3G, seven), (TWO_3G, (("7g.80gb", 0),)), with_reboot=True) == {
        "nvidia.com/mig-1g.10gb"
    }


def test_a_pod_whose_claims_cannot_be_read_is_in_the_way_of_any_reconfiguration_of_its_node() -> None:
    def pod(limits: dict[str, str], claims: bool) -> dict:
        spec: dict = {"containers": [{"name": "job", "resources": {"limits": limits}}]}
        if claims:
            spec["resourceClaims"] = [{"name": "devices", "resourceClaimName": "mc-1-0-devices"}]
        return {"spec": spec}

    whole = frozenset({"nvidia.com/gpu"})
    # On a static-MIG DRA node the claim, not the pod, says which device it holds; without a reading of it (the
    # claims reader: test_kube_dra_drain.py) it goes whenever anything drains.
    assert pod_in_the_way(pod({"cpu": "4"}, claims=True), whole)
    assert pod_in_the_way(pod({}, claims=True), frozenset({"nvidia.com/mig-1g.10gb"}))
    assert not pod_in_the_way(pod({}, claims=True), frozenset())  # nothing changes
    # A device-plugin pod (an EFA claim beside it or not) is judged by its resources, as before.
    assert pod_in_the_way(pod({"nvidia.com/gpu": "1"}, claims=True), whole)
    assert not pod_in_the_way(pod({"nvidia.com/mig-3g.40gb": "1"}, claims=True), whole)
    assert not pod_in_the_way(pod({"cpu": "4"}, claims=False), whole)
