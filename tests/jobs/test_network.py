"""A job's network: the fabric its multi-node placement talks over (page and API), and the submit warning."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.models import Allocation, Job
from jobs.selectors.network import job_network, network_of
from scheduler.models import Node
from tests.factories import GpuModelFactory, NodeFactory
from tests.jobs.test_views_pages import SUBMIT
from tests.portal.fleet import running_job

pytestmark = pytest.mark.django_db

GANG = {**SUBMIT, "kind": "training", "request_by": "gpus", "gpus": "8", "replicas": "2", "mode": "training"}


def _nodes(count: int, *, fabric: str = "tcp", devices: int = 0, prefix: str = "h100") -> list[Node]:
    model = GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100", memory_mib=81920, mig_capable=True)
    return [
        NodeFactory(
            name=f"{prefix}-{i}", gpu_model=model, gpu_count=8, fabric=fabric, fabric_devices=devices, tier="on-demand"
        )
        for i in range(count)
    ]


def _gang(team, nodes: list[Node], **fields: object) -> Job:  # type: ignore[no-untyped-def]
    job = running_job(team, nodes[0], name="gang", replicas=len(nodes), **fields)
    started = Allocation.objects.get(job=job).started_at
    for replica, node in enumerate(nodes[1:], start=1):
        Allocation.objects.create(
            job=job, replica=replica, node=node, gpu_index=1, tier=node.tier, price_per_gpu_hour=1, started_at=started
        )
    return job


def test_a_gang_on_efa_nodes_shows_its_fabric_on_the_page_and_in_the_api(client, team, member, outsider) -> None:
    job = _gang(team, _nodes(2, fabric="efa", devices=32), submitted_by=member)
    client.force_login(member)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert "EFA × 32 per node" in body
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=member).key}")
    network = api.get(f"/api/v1/jobs/{job.pk}/").json()["network"]
    assert network == {"fabric": "efa", "devices_per_node": 32, "nodes": 2, "label": "EFA × 32 per node"}
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404


def test_a_gang_on_tcp_nodes_says_so_and_a_one_node_job_shows_no_network(client, team, member) -> None:
    nodes = _nodes(2)
    gang = _gang(team, nodes, submitted_by=member)
    single = running_job(team, nodes[0], name="single", gpu_index=2, submitted_by=member)
    client.force_login(member)
    assert "TCP only — no fabric on these nodes" in client.get(reverse("jobs:detail", args=[gang.pk])).content.decode()
    assert 'data-testid="network"' not in client.get(reverse("jobs:detail", args=[single.pk])).content.decode()
    assert job_network(job=single) is None


def test_an_ended_job_shows_the_network_of_its_latest_run_only(team) -> None:
    old = _nodes(2, prefix="old")
    job = _gang(team, old)
    Allocation.objects.filter(job=job).update(ended_at=timezone.now(), started_at=timezone.now() - timedelta(days=1))
    new = _nodes(1, fabric="infiniband", devices=8, prefix="ib")
    Allocation.objects.create(
        job=job, replica=0, node=new[0], gpu_index=0, tier="on-demand", price_per_gpu_hour=1, started_at=timezone.now()
    )
    Allocation.objects.filter(job=job, node=new[0]).update(ended_at=timezone.now())
    assert job_network(job=job) is None  # the latest run sat on one node


def test_network_of_names_the_devices_and_never_hides_a_mix() -> None:
    efa = _nodes(2, fabric="efa", devices=32)
    efa[1].fabric_devices = 16
    assert network_of(efa).label == "EFA × 16–32 per node"  # type: ignore[union-attr]
    tcp = _nodes(1, prefix="tcp")
    mixed = network_of([efa[0], tcp[0]])
    assert mixed is not None and mixed.fabric == "mixed" and "TCP speed" in mixed.label


def test_submit_warns_when_a_gang_could_only_land_on_nodes_without_a_fabric(client, member) -> None:
    _nodes(2)
    client.force_login(member)
    body = client.post(reverse("jobs:suggest"), GANG).content.decode()
    assert 'data-testid="fabric-warning"' in body and "TCP" in body
    page = client.post(reverse("jobs:submit"), {**GANG, "name": ""}).content.decode()  # invalid: re-rendered
    assert 'data-testid="fabric-warning"' in page


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"gpus": "4", "replicas": "2"}, "the gang fits one node"),
        ({}, "EFA nodes hold it"),
        ({"replicas": "1"}, "one replica"),
    ],
)
def test_submit_does_not_warn(client, member, fields, why) -> None:
    _nodes(2)
    if why == "EFA nodes hold it":
        _nodes(2, fabric="efa", devices=32, prefix="efa")
    client.force_login(member)
    body = client.post(reverse("jobs:suggest"), {**GANG, **fields}).content.decode()
    assert 'data-testid="suggested"' in body, why
    assert 'data-testid="fabric-warning"' not in body, why


def test_submit_warns_when_the_fabric_nodes_are_too_few(client, member) -> None:
    _nodes(3)
    _nodes(1, fabric="efa", devices=32, prefix="efa")
    client.force_login(member)
    body = client.post(reverse("jobs:suggest"), {**GANG, "replicas": "3"}).content.decode()
    assert 'data-testid="fabric-warning"' in body
