"""An admin's cordon or drain carried to Kubernetes (scheduler.loop.cordons, KubeGateway.node_cordon) against the
API emulator, with the unmodified official client: the node is cordoned as ``kubectl cordon`` does (a merge patch
of ``spec.unschedulable``, kubectl's drain.RunCordonOrUncordon) and marked as Microcosm's; marking it ready lifts
only Microcosm's own cordon; a MIG reconfiguration still running takes the cordon over."""

from __future__ import annotations

import pytest

from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.mig import CORDONED_BY_ADMIN, CORDONED_BY_US, PHASE
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node
from scheduler.node_states import node_cordon, node_drain, node_mark_ready
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import H100_ONE_LEAF as H100
from tests.scheduler.kube_emulator import cluster_fixture

pytestmark = pytest.mark.django_db
cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
NODE = "p5-od-1"


def _seed(cluster, **node) -> KubeGateway:
    cluster.add_node(
        NODE, {**H100, "karpenter.sh/capacity-type": "on-demand"}, allocatable={"nvidia.com/gpu": "8"}, **node
    )
    gateway = KubeGateway(cluster.new_api_client(), namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    return gateway


def _cordon(cluster) -> tuple[bool, str | None]:
    raw = cluster.node(NODE)
    return bool(raw["spec"].get("unschedulable")), (raw["metadata"].get("annotations") or {}).get(CORDONED_BY_ADMIN)


def test_a_drain_cordons_the_kubernetes_node_once_and_ready_lifts_it(cluster) -> None:
    gateway = _seed(cluster)
    node_drain(node=Node.objects.get(name=NODE), actor=None, reason="PSU")

    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert f"cordon {NODE}" in report.applied
    assert _cordon(cluster) == (True, "true")
    observed = next(n for n in gateway.observe().nodes if n.name == NODE)
    assert (observed.schedulable, observed.cordoned_by_admin) == (False, True)

    cluster.clear_log()
    cycle_run(gateway=gateway, retry=NO_WAIT)  # already cordoned: nothing to patch
    assert cluster.requests("PATCH", f"/nodes/{NODE}$") == []

    node_mark_ready(node=Node.objects.get(name=NODE), actor=None)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert f"uncordon {NODE}" in report.applied
    assert _cordon(cluster) == (False, None)


def test_somebody_elses_cordon_is_never_lifted(cluster) -> None:
    gateway = _seed(cluster, unschedulable=True)  # `kubectl cordon` by an operator
    node = Node.objects.get(name=NODE)
    node_cordon(node=node, actor=None)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert _cordon(cluster) == (True, None)  # closed already: not marked as Microcosm's

    node_mark_ready(node=node, actor=None)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert not [op for op in report.applied if "cordon" in op]
    assert _cordon(cluster) == (True, None)  # still the operator's


def test_a_mig_reconfiguration_running_when_the_cordon_ends_takes_it_over(cluster) -> None:
    gateway = _seed(cluster)
    node_drain(node=Node.objects.get(name=NODE), actor=None)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    cluster.patch_node(NODE, {"metadata": {"annotations": {PHASE: "applying"}}})

    gateway.node_cordon(node=NODE, cordoned=False)

    annotations = cluster.node(NODE)["metadata"]["annotations"]
    assert cluster.node(NODE)["spec"]["unschedulable"] is True  # the flow uncordons it when the layout is live
    assert CORDONED_BY_ADMIN not in annotations and annotations[CORDONED_BY_US] == "true"
