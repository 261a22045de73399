"""A multi-node job from the portal to a formed torch.distributed group, on the Kubernetes API emulator (the
official client over HTTP): a team lead submits a 2 × 8-GPU gang through the REST API; the nodes sync with their
EFA fabric; one cycle binds the gang across both nodes with its headless Service, the rendezvous environment,
``/dev/shm`` and every EFA interface of each node; the job page shows "EFA × 32 per node" (an outsider gets 404);
real processes started with exactly the pods' environment form one group and all-reduce; the job completes and its
Service is deleted (docs/distributed-training.md)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.models import Job
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.models import Node
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.factories import MembershipFactory, UserFactory
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture
from tests.scheduler.loop_helpers import team_seed
from tests.scheduler.rendezvous_helpers import assert_group_formed, free_port, run_gang

pytestmark = pytest.mark.django_db
cluster = pytest.fixture(cluster_fixture)
NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
EFA_NODE = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}


def test_a_gang_submitted_in_the_portal_runs_across_efa_nodes_and_forms_a_torch_distributed_group(
    cluster, outsider, tmp_path
) -> None:
    for name in ("p5-a", "p5-b"):
        cluster.add_node(name, {**H100_ONE_LEAF, "karpenter.sh/capacity-type": "on-demand"}, allocatable=EFA_NODE)
    gateway = KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        sleep=lambda _s: None,
        rendezvous_port=free_port(),
    )
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    assert set(Node.objects.values_list("fabric", "fabric_devices")) == {("efa", 32)}

    team = team_seed(guaranteed=16, burst=16)
    lead = MembershipFactory(team=team, role="lead", user=UserFactory(username="nlp-lead")).user
    api = APIClient()
    api.force_authenticate(lead)
    spec = {"team": "nlp", "name": "llm-pretrain", "kind": "training", "gpus": 8, "replicas": 2}
    submitted = api.post("/api/v1/jobs/", {**spec, "image": "ghcr.io/acme/train:1"}, format="json")
    assert submitted.status_code == 201, submitted.json()
    job = Job.objects.get(pk=submitted.json()["id"])

    assert cycle_run(gateway=gateway, retry=NO_WAIT).applied == [f"bind {job.pk}"]

    pods = sorted(cluster.pods(team.namespace), key=lambda p: p["metadata"]["name"])
    assert {p["spec"]["nodeName"] for p in pods} == {"p5-a", "p5-b"}  # 8 GPUs each: one replica a node
    services = cluster.services(team.namespace)
    assert list(services) == [f"mc-{job.pk}"] and services[f"mc-{job.pk}"]["spec"]["clusterIP"] == "None"
    for rank, pod in enumerate(pods):
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container["env"]}
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"mc-{job.pk}-{rank}", f"mc-{job.pk}")
        assert env["MASTER_ADDR"] == f"mc-{job.pk}-0.mc-{job.pk}.{team.namespace}.svc"
        assert (env["WORLD_SIZE"], env["RANK"], env["NPROC_PER_NODE"]) == ("2", str(rank), "8")
        assert env["FI_PROVIDER"] == "efa"
        assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"  # every interface of its node
        shm = {v["name"]: v for v in pod["spec"]["volumes"]}["dshm"]
        assert shm["emptyDir"]["medium"] == "Memory"

    client = APIClient()
    client.force_login(lead)
    page = client.get(reverse("jobs:detail", args=[job.pk]))
    assert page.status_code == 200 and "EFA × 32 per node" in page.content.decode()
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404

    # A real program started with exactly the pods' environment forms one group across the two "nodes".
    assert_group_formed(run_gang(pods, tmp_path), 2)

    for pod in pods:
        cluster.set_pod_phase(team.namespace, pod["metadata"]["name"], "Succeeded")
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "completed"
    assert cluster.services(team.namespace) == {} and cluster.pods(team.namespace) == []
