"""A multi-replica job's rendezvous and every GPU pod's /dev/shm on the Kubernetes gateway, with the official client
over HTTP against kmock's emulator (docs/distributed-training.md): the headless Service's life, the pods' hostname,
subdomain and environment, a requeued gang's identical rendezvous, and the /dev/shm size from the node's memory."""

from __future__ import annotations

import pytest

from scheduler.core.gpus.catalog import MEMORY_SLICES, profile_spec
from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.kube.pods import pod_manifest
from scheduler.gateways.kube.shared_memory import gpu_equivalents, quantity_bytes, shm_size_limit
from scheduler.gateways.protocol import FINAL_EVICTIONS, BindRequest, Device, ReplicaPlacement
from tests.scheduler.kube_emulator import H100_ONE_LEAF, cluster_fixture
from tests.scheduler.rendezvous_helpers import EXAMPLE, assert_group_formed, free_port, run_gang

cluster = pytest.fixture(cluster_fixture)
NAMESPACE = "team-nlp"
NODE_MEMORY = "2113456124Ki"  # what a p5.48xlarge's kubelet reports as capacity, roughly 2 TiB
RENDEZVOUS_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NNODES", "NODE_RANK", "NPROC_PER_NODE")
PET_ENV = ("PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE")


def _gateway(cluster, **settings) -> KubeGateway:
    return KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        sleep=lambda _s: None,
        request_timeout_s=2.0,
        default_image="ghcr.io/acme/train:1",
        **settings,
    )


def _gang(job: str = "42", *, replicas: int = 2, gpus: int = 4, nodes: tuple[str, ...] = ("gpu-a",)) -> BindRequest:
    """``replicas`` × ``gpus`` whole GPUs, replica r on ``nodes[r % len(nodes)]``."""
    placements = []
    for replica in range(replicas):
        node = nodes[replica % len(nodes)]
        first = gpus * (replica // len(nodes))
        placements.append(ReplicaPlacement(replica, node, tuple(Device(first + g) for g in range(gpus))))
    return BindRequest(job=job, namespace=NAMESPACE, name="llama-pretrain", placements=tuple(placements))


def _env(pod) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def _pods(cluster) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in cluster.pods(NAMESPACE)}


def _rendezvous(pod) -> tuple[str, str, dict[str, str]]:
    return pod["spec"]["hostname"], pod["spec"]["subdomain"], _env(pod)


def _shm(pod) -> dict:
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "dshm"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["spec"]["containers"][0]["volumeMounts"]
    return volume["emptyDir"]


@pytest.fixture
def nodes(cluster) -> None:
    for name in ("gpu-a", "gpu-b"):
        cluster.add_node(name, H100_ONE_LEAF, allocatable={"nvidia.com/gpu": "8"}, capacity={"memory": NODE_MEMORY})


def test_a_gang_gets_one_headless_service_and_every_replica_its_rendezvous(cluster, nodes) -> None:
    gateway = _gateway(cluster, rendezvous_port=29511, shm_fraction=0.25)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    gateway.job_bind(request=_gang(nodes=("gpu-a", "gpu-b")))
    gateway.job_bind(request=_gang(nodes=("gpu-a", "gpu-b")))  # applied twice: nothing new

    # The Service exists before the first pod, and is created once.
    posts = [path for _m, path in cluster.requests("POST", r"/(services|pods)$")]
    assert posts == [f"/api/v1/namespaces/{NAMESPACE}/services"] + [f"/api/v1/namespaces/{NAMESPACE}/pods"] * 2
    service = cluster.services(NAMESPACE)["mc-42"]
    ours = {"app.kubernetes.io/managed-by": "microcosm", "microcosm.io/job": "42"}
    assert service["metadata"]["labels"] == {**ours, "microcosm.io/team": "nlp"}
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == ours
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert [(p["name"], p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [("rendezvous", 29511, "TCP")]

    pods = _pods(cluster)
    assert sorted(pods) == ["mc-42-0", "mc-42-1"]
    per_gpu_mib = 0.25 * quantity_bytes(NODE_MEMORY) / int(H100_ONE_LEAF["nvidia.com/gpu.count"]) / 2**20
    for replica in (0, 1):
        pod = pods[f"mc-42-{replica}"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"mc-42-{replica}", "mc-42")
        env = _env(pod)
        assert {name: env[name] for name in RENDEZVOUS_ENV} == {
            "MASTER_ADDR": f"mc-42-0.mc-42.{NAMESPACE}.svc",
            "MASTER_PORT": "29511",
            "WORLD_SIZE": "2",
            "RANK": str(replica),
            "NNODES": "2",
            "NODE_RANK": str(replica),
            "NPROC_PER_NODE": "4",
        }
        # Kubeflow's names for the same values (kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go,
        # master.go), which torchrun reads for every option it is not given.
        assert {name: env[name] for name in PET_ENV} == {
            "PET_MASTER_ADDR": f"mc-42-0.mc-42.{NAMESPACE}.svc",
            "PET_MASTER_PORT": "29511",
            "PET_NNODES": "2",
            "PET_NODE_RANK": str(replica),
            "PET_NPROC_PER_NODE": "4",
        }
        assert _shm(pod) == {"medium": "Memory", "sizeLimit": f"{int(per_gpu_mib * 4)}Mi"}


def test_a_single_replica_job_gets_no_service_and_no_rendezvous_but_its_shared_memory(cluster, nodes) -> None:
    gateway = _gateway(cluster)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    gateway.job_bind(request=_gang(replicas=1, gpus=8))

    assert cluster.requests(path=r"/services") == []
    assert cluster.services(NAMESPACE) == {}
    (pod,) = cluster.pods(NAMESPACE)
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]
    assert not set(RENDEZVOUS_ENV) & set(_env(pod))
    per_gpu_mib = 0.5 * quantity_bytes(NODE_MEMORY) / 8 / 2**20  # the default fraction, a whole 8-GPU node
    assert _shm(pod) == {"medium": "Memory", "sizeLimit": f"{int(per_gpu_mib * 8)}Mi"}


@pytest.mark.parametrize("reason", sorted(FINAL_EVICTIONS))
def test_the_service_goes_with_the_job_and_stays_while_it_comes_back(cluster, nodes, reason) -> None:
    gateway = _gateway(cluster)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_gang())

    for requeued in ("spot-reclaim", "node-lost", "priority", "reclaim", "repartition"):
        gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason=requeued)
        assert set(cluster.services(NAMESPACE)) == {"mc-42"}, requeued

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason=reason)
    assert cluster.services(NAMESPACE) == {} and cluster.pods(NAMESPACE) == []
    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason=reason)  # idempotent


def test_a_requeued_gang_bound_on_other_nodes_gets_exactly_the_same_rendezvous(cluster, nodes) -> None:
    gateway = _gateway(cluster)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_gang(replicas=4, gpus=2, nodes=("gpu-a",)))
    before = {
        name: (pod["spec"]["hostname"], pod["spec"]["subdomain"], _env(pod)) for name, pod in _pods(cluster).items()
    }

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="spot-reclaim")
    assert cluster.pods(NAMESPACE) == []
    gateway.job_bind(request=_gang(replicas=4, gpus=2, nodes=("gpu-b", "gpu-a")))

    after = _pods(cluster)
    assert {name: pod["spec"]["nodeName"] for name, pod in after.items()} == {
        "mc-42-0": "gpu-b",
        "mc-42-1": "gpu-a",
        "mc-42-2": "gpu-b",
        "mc-42-3": "gpu-a",
    }
    assert {
        name: (pod["spec"]["hostname"], pod["spec"]["subdomain"], _env(pod)) for name, pod in after.items()
    } == before
    assert set(cluster.services(NAMESPACE)) == {"mc-42"}


def test_a_service_of_that_name_that_is_not_the_jobs_refuses_the_bind_before_any_pod(cluster, nodes) -> None:
    gateway = _gateway(cluster)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    cluster.core.create_namespaced_service(
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mc-42"}, "spec": {"ports": [{"port": 80}]}},
    )

    with pytest.raises(GatewayConflict, match="Service team-nlp/mc-42 exists and is not job 42's rendezvous"):
        gateway.job_bind(request=_gang())
    assert cluster.pods(NAMESPACE) == []

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="cancelled")
    assert set(cluster.services(NAMESPACE)) == {"mc-42"}  # someone else's: left alone


def test_creating_the_service_is_retried_through_a_server_error(cluster, nodes) -> None:
    gateway = _gateway(cluster)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    cluster.fail("POST", r"/services$", 503)

    gateway.job_bind(request=_gang())

    assert len(cluster.requests("POST", r"/services$")) == 2
    assert set(cluster.services(NAMESPACE)) == {"mc-42"} and len(cluster.pods(NAMESPACE)) == 2


# -- the /dev/shm size, pure ----------------------------------------------------------------------------------


def test_a_mig_instance_counts_its_memory_slices_and_unknowns_leave_the_size_open() -> None:
    model = "H100-SXM5-80GB"
    spec = profile_spec(model, "3g.40gb")
    assert spec is not None
    assert gpu_equivalents(model, [Device(0, "3g.40gb", 4), Device(1)]) == spec.memory_slices / MEMORY_SLICES + 1
    assert gpu_equivalents(model, [Device(0, "9g.99gb", 0)]) is None

    memory = quantity_bytes("1Ti")
    assert memory == 2**40
    expected = int(0.5 * memory / 8 * spec.memory_slices / MEMORY_SLICES) // 2**20
    limit = shm_size_limit(node_memory="1Ti", gpu_count=8, model=model, devices=[Device(0, "3g.40gb", 4)], fraction=0.5)
    assert limit == f"{expected}Mi"
    for unknown in (None, "", "lots"):
        assert shm_size_limit(node_memory=unknown, gpu_count=8, model=model, devices=[Device(0)], fraction=0.5) is None
    assert shm_size_limit(node_memory="1Ti", gpu_count=0, model=model, devices=[Device(0)], fraction=0.5) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2113456124Ki", 2113456124 * 1024), ("512Gi", 512 * 2**30), ("1e9", 10**9), ("1.5G", 1_500_000_000), ("7", 7)],
)
def test_memory_quantities_are_read_as_kubernetes_writes_them(text: str, expected: int) -> None:
    assert quantity_bytes(text) == expected


def test_a_mig_instance_is_one_process_and_the_jobs_own_env_cannot_move_the_rendezvous() -> None:
    placements = (
        ReplicaPlacement(0, "gpu-a", (Device(0, "3g.40gb", 0), Device(0, "3g.40gb", 4))),
        ReplicaPlacement(1, "gpu-b", (Device(2),)),
    )
    request = BindRequest(
        job="7", namespace="team-cv", name="n", placements=placements, env={"MASTER_ADDR": "10.0.0.9", "RANK": "5"}
    )

    env = {p.replica: _env(pod_manifest(request, p, team="", image="i", grace_s=5)) for p in placements}

    assert (env[0]["NPROC_PER_NODE"], env[1]["NPROC_PER_NODE"]) == ("2", "1")
    assert {e["MASTER_ADDR"] for e in env.values()} == {"mc-7-0.mc-7.team-cv.svc"}
    assert (env[0]["RANK"], env[1]["RANK"]) == ("0", "1")


def test_a_bare_torchrun_as_a_kubeflow_image_runs_it_forms_one_world_of_every_pod(cluster, nodes, tmp_path) -> None:
    """An image built for a Kubeflow PyTorchJob starts ``torchrun <script>`` with no options: torchrun takes each
    from ``PET_<OPTION>`` (pytorch, torch.distributed's argparse_util module) and, without them, runs one node alone on
    127.0.0.1, a world per pod. Real torchrun, one agent per pod, the pods' names resolved as cluster DNS would."""
    gateway = _gateway(cluster, rendezvous_port=free_port())
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_gang(replicas=2, gpus=2, nodes=("gpu-a", "gpu-b")))

    outputs = run_gang(cluster.pods(NAMESPACE), tmp_path, ["torchrun", str(EXAMPLE)])

    assert_group_formed(outputs, 2, per_pod=2)
