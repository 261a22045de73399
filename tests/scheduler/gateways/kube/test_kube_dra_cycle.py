"""A whole scheduling cycle on a Dynamic Resource Allocation node: the job's replica is bound through its
ResourceClaim, and its chargeback equals that of the same job on a device-plugin node (the ledger counts the
devices the cycle recorded, not the Kubernetes resource names the gateway wrote)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.models import LedgerEntry
from billing.services.ledger import ledger_close_interval
from jobs.models import Allocation
from jobs.services import job_submit
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import H100_ONE_LEAF as H100
from tests.scheduler.kube_emulator import Cluster
from tests.scheduler.kube_harness.resource_claims import DraKubelet
from tests.scheduler.loop_helpers import Clock, team_seed

pytestmark = pytest.mark.django_db
NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
SPEC = {"kind": "training", "gpus": 4, "replicas": 1, "image": "ghcr.io/acme/train:1", "duration_s": 7200}


def _run(*, dra: bool, team_slug: str) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """One job through one cycle on a one-node cluster of its own; its allocations and ledger over two hours, and
    its pod."""
    cluster = Cluster()
    try:
        name = "gpu-1"
        if dra:  # no extended resources: the NVIDIA DRA driver publishes the GPUs, which the gateway reads (KUBE_DRA)
            cluster.add_dra_node(name, H100)
            cluster.add_device_classes()
        else:
            cluster.add_node(name, H100, allocatable={"nvidia.com/gpu": "8"})
        kubelet = DraKubelet(cluster.handler)  # prepares what the node's slices publish
        cluster.handler.bind_hooks.append(kubelet.on_bind)
        gateway = KubeGateway(
            cluster.new_api_client(),
            consistent_reads=True,
            namespace_create=True,
            sleep=lambda _s: None,
            dra=dra,
        )
        gpu_models_sync()
        cluster_sync(observation=gateway.observe())
        Node.objects.filter(name=name).update(price_per_gpu_hour=Decimal("3.2500"))  # the inventory's price
        team = team_seed(team_slug)
        job = job_submit(team=team, spec=SPEC, actor=None, now=Clock().now)

        report = cycle_run(gateway=gateway, retry=NO_WAIT)

        assert report.applied == [f"bind {job.pk}"], report.failed
        assert kubelet.refused == []
        (pod,) = cluster.pods(team.namespace)
        allocations = list(Allocation.objects.filter(job=job).order_by("replica", "gpu_index"))
        rows = []
        for allocation in allocations:
            # Two hours of running, closed: the hour boundaries of the wall clock split them differently per run, so
            # the totals are compared (to the ledger's rounding of each interval).
            ended = allocation.started_at + timedelta(hours=2)
            Allocation.objects.filter(pk=allocation.pk).update(ended_at=ended, end_reason="completed")
            ledger_close_interval(allocation_id=allocation.pk, until=ended + timedelta(hours=1))
            entries = list(LedgerEntry.objects.filter(allocation=allocation))
            hours = sum((e.gpu_hours for e in entries), Decimal(0)).quantize(Decimal("0.0001"))
            cost = sum((e.cost for e in entries), Decimal(0)).quantize(Decimal("0.0001"))
            rows.append(
                (
                    allocation.gpu_index,
                    allocation.mig_profile,
                    allocation.tier,
                    allocation.price_per_gpu_hour,
                    {(e.gpu_model, e.gpu_units, e.tier) for e in entries},
                    hours,
                    cost,
                )
            )
        gateway.close()
        # The other run's cluster has none of this job's pods: it leaves the database with its cluster.
        LedgerEntry.objects.filter(allocation__job=job).delete()
        Allocation.objects.filter(job=job).delete()
        job.delete()
        return rows, pod
    finally:
        cluster.close()


def test_a_dra_placed_job_is_charged_as_the_same_job_on_a_device_plugin_node() -> None:
    on_plugin, plugin_pod = _run(dra=False, team_slug="plugin")
    on_dra, dra_pod = _run(dra=True, team_slug="dra")

    assert plugin_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert (
        dra_pod["spec"]["resourceClaims"]
        and "nvidia.com/gpu" not in dra_pod["spec"]["containers"][0]["resources"]["limits"]
    )
    assert dra_pod["status"]["phase"] == "Running"  # the kubelet model admitted it: its claim was reserved
    assert len(on_dra) == 4 and all(hours == Decimal(2) for *_r, hours, _cost in on_dra)
    assert {cost for *_r, cost in on_dra} == {Decimal("6.5000")}  # 2 h × 3.25 per GPU
    assert on_dra == on_plugin
