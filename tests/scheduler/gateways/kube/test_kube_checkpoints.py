"""Checkpoint storage on the Kubernetes gateway, with the official client over HTTP against kmock's emulator: the
team's checkpoint claim, what a checkpointed job's pods mount, the report Secret's life, pods in their termination
grace, and the manifest fallback."""

from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path

import pytest

from jobs.credentials import job_for_token, job_token
from jobs.services import job_submit
from microcosm_checkpoint import manifest
from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.gateway import KubeGateway
from scheduler.gateways.protocol import BindRequest, Device, ReplicaPhase, ReplicaPlacement
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.services.fleet import gpu_models_sync
from scheduler.services.sync import cluster_sync
from tests.scheduler.kube_emulator import cluster_fixture
from tests.scheduler.loop_helpers import Clock, team_seed

cluster = pytest.fixture(cluster_fixture)

H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}
NOW = 1_800_000_000.0
TOKEN = "mcj.42.0123456789abcdef"
NAMESPACE = "team-nlp"


def _gateway(cluster, **settings) -> KubeGateway:
    return KubeGateway(
        cluster.new_api_client(),
        consistent_reads=True,
        namespace_create=True,
        clock=lambda: NOW,
        sleep=lambda _s: None,
        request_timeout_s=1.0,
        default_image="ghcr.io/acme/train:1",
        **settings,
    )


@pytest.fixture
def gateway(cluster) -> KubeGateway:
    return _gateway(cluster, report_url="https://microcosm.example.com")


def _request(job: str = "42", replicas: int = 2, *, checkpointed: bool = True, **fields) -> BindRequest:
    """Job ``job`` on GPUs of gpu-a of its own (job 42: GPUs 0 and 1, job 43: 4 and 5…)."""
    first = 4 * (int(job) - 42)
    request = BindRequest(
        job=job,
        namespace=NAMESPACE,
        name="llama-finetune",
        placements=tuple(ReplicaPlacement(r, "gpu-a", (Device(first + r),)) for r in range(replicas)),
        checkpoint_interval_s=600 if checkpointed else None,
        checkpoint_dir=f"/checkpoints/job-{job}" if checkpointed else "",
        credential=TOKEN if checkpointed else "",
    )
    return dataclasses.replace(request, **fields)


def _env(pod) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def _token(secret) -> str:
    return base64.b64decode(secret["data"]["token"]).decode()


# -- the team's claim -----------------------------------------------------------------------------------------


def test_namespace_ensure_creates_the_checkpoint_claim_once(cluster, gateway) -> None:
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    (claim,) = cluster.claims(NAMESPACE)
    assert claim["metadata"]["name"] == "microcosm-checkpoints"
    assert claim["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "microcosm", "microcosm.io/team": "nlp"}
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"]["requests"] == {"storage": "100Gi"}
    assert "storageClassName" not in claim["spec"]  # the cluster's default class
    assert len(cluster.requests("POST", r"/persistentvolumeclaims$")) == 1


def test_the_claim_takes_the_storage_class_and_size_of_the_settings(cluster) -> None:
    gateway = _gateway(cluster, checkpoint_storage_class="efs-sc", checkpoint_size="2Ti")

    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    (claim,) = cluster.claims(NAMESPACE)
    assert (claim["spec"]["storageClassName"], claim["spec"]["resources"]["requests"]["storage"]) == ("efs-sc", "2Ti")


def test_a_team_naming_its_own_claim_gets_none_created_and_its_jobs_mount_that_claim(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp", checkpoint_claim="nlp-scratch")
    assert cluster.claims(NAMESPACE) == []

    with pytest.raises(GatewayConflict, match="has no PersistentVolumeClaim nlp-scratch"):
        gateway.job_bind(request=_request(checkpoint_claim="nlp-scratch"))
    assert cluster.pods(NAMESPACE) == [] and cluster.secrets(NAMESPACE) == {}  # refused before touching anything

    cluster.add_claim(NAMESPACE, "nlp-scratch")
    gateway.job_bind(request=_request(checkpoint_claim="nlp-scratch"))

    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for p in cluster.pods(NAMESPACE)
        for v in p["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {"nlp-scratch"}


# -- what a checkpointed job's pods carry ---------------------------------------------------------------------


def test_a_checkpointed_job_mounts_the_claim_and_its_report_credential(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    gateway.job_bind(request=_request(resume_from="/checkpoints/job-42/step-000001200.ckpt"))

    # The Secret the pods mount exists before the first pod is created.
    posts = [path for _m, path in cluster.requests("POST", r"/(secrets|pods)$")]
    assert posts[0] == f"/api/v1/namespaces/{NAMESPACE}/secrets" and len(posts) == 3
    secret = cluster.secrets(NAMESPACE)["mc-42-report"]
    assert _token(secret) == TOKEN
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "microcosm",
        "microcosm.io/job": "42",
        "microcosm.io/team": "nlp",
    }
    pods = cluster.pods(NAMESPACE)
    assert len(pods) == 2
    for pod in pods:
        assert pod["spec"]["volumes"] == [
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "microcosm-checkpoints"}},
            {"name": "report-credential", "secret": {"secretName": "mc-42-report"}},
            # every GPU pod's /dev/shm; the node reports no memory: half the process memory (1 GPU × 64 GiB)
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32768Mi"}},
        ]
        assert pod["spec"]["containers"][0]["volumeMounts"] == [
            {"name": "checkpoints", "mountPath": "/checkpoints"},
            {"name": "report-credential", "mountPath": "/var/run/secrets/microcosm", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ]
        env = _env(pod)
        assert env["CHECKPOINT_DIR"] == "/checkpoints/job-42"
        assert env["RESUME_FROM"] == "/checkpoints/job-42/step-000001200.ckpt"
        assert env["MICROCOSM_TOKEN_FILE"] == "/var/run/secrets/microcosm/token"
        assert env["MICROCOSM_URL"] == "https://microcosm.example.com"
        assert TOKEN not in str(pod)  # the token is in the Secret only, never in the pod's spec


def test_a_job_that_does_not_checkpoint_mounts_nothing_and_gets_no_credential(cluster) -> None:
    cluster.add_node("gpu-a", H100)
    gateway = _gateway(cluster)  # no report URL either
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    gateway.job_bind(request=_request(checkpointed=False))

    for pod in cluster.pods(NAMESPACE):
        # Only the /dev/shm every GPU pod has.
        assert [v["name"] for v in pod["spec"]["volumes"]] == ["dshm"]
        assert [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]] == ["/dev/shm"]
        env = _env(pod)
        assert "MICROCOSM_TOKEN_FILE" not in env and "MICROCOSM_URL" not in env and env["CHECKPOINT_DIR"] == ""
    assert cluster.secrets(NAMESPACE) == {}


def test_without_a_report_url_the_pods_get_the_token_file_but_no_url(cluster) -> None:
    cluster.add_node("gpu-a", H100)
    gateway = _gateway(cluster)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")

    gateway.job_bind(request=_request(replicas=1))

    env = _env(cluster.pods(NAMESPACE)[0])
    assert env["MICROCOSM_TOKEN_FILE"] == "/var/run/secrets/microcosm/token" and "MICROCOSM_URL" not in env


def test_binding_again_keeps_the_secret_and_replaces_a_stale_token(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="reclaim")

    # Same token: the existing Secret is kept as it is.
    gateway.job_bind(request=_request())
    assert _token(cluster.secrets(NAMESPACE)["mc-42-report"]) == TOKEN
    assert cluster.requests("DELETE", r"/secrets/") == []

    # A token derived under another SECRET_KEY: replaced, since the API would refuse the old one.
    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="reclaim")
    gateway.job_bind(request=_request(credential="mcj.42.fedcba9876543210"))
    assert _token(cluster.secrets(NAMESPACE)["mc-42-report"]) == "mcj.42.fedcba9876543210"


def test_a_secret_of_that_name_that_is_not_ours_refuses_the_bind_and_is_never_deleted(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    foreign = base64.b64encode(b"someone else's").decode()
    cluster.add_secret(NAMESPACE, "mc-42-report", labels={"app": "other"}, data={"token": foreign})

    with pytest.raises(GatewayConflict, match="is not job 42's report credential"):
        gateway.job_bind(request=_request())
    assert cluster.pods(NAMESPACE) == []
    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=0, reason="completed")

    assert cluster.secrets(NAMESPACE)["mc-42-report"]["data"]["token"] == foreign


@pytest.mark.parametrize("reason", ["completed", "failed", "cancelled", "unknown-job"])
def test_the_credential_is_deleted_when_the_job_is_removed_for_good(cluster, gateway, reason) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    gateway.job_bind(request=_request("43", replicas=1))

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=30, reason=reason)
    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=30, reason=reason)  # idempotent

    assert sorted(cluster.secrets(NAMESPACE)) == ["mc-43-report"]  # the other job's stays
    assert {p["metadata"]["labels"]["microcosm.io/job"] for p in cluster.pods(NAMESPACE)} == {"43"}


@pytest.mark.parametrize("reason", ["reclaim", "priority", "node-lost", "repartition", "production", "requeued"])
def test_the_credential_is_kept_when_the_job_comes_back(cluster, gateway, reason) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())

    gateway.job_evict(job="42", namespace=NAMESPACE, grace_s=30, reason=reason)

    assert cluster.pods(NAMESPACE) == []
    assert _token(cluster.secrets(NAMESPACE)["mc-42-report"]) == TOKEN


# -- pods asked to stop ---------------------------------------------------------------------------------------


def test_a_terminating_pod_is_stopping_until_it_has_stopped(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    for replica in (0, 1):
        cluster.set_pod_phase(NAMESPACE, f"mc-42-{replica}", "Running")

    cluster.terminate_pod(NAMESPACE, "mc-42-0")  # a drain on a spot notice: SIGTERM, then the grace
    replicas = gateway.observe().jobs["42"].replicas
    assert [r.phase for r in replicas] == [ReplicaPhase.STOPPING, ReplicaPhase.RUNNING]
    assert replicas[0].node == "gpu-a"

    # Its process saved and exited: stopped, not succeeded (the work is not done, it was asked to stop).
    cluster.set_pod_phase(NAMESPACE, "mc-42-0", "Succeeded")
    assert gateway.observe().jobs["42"].replicas[0].phase == ReplicaPhase.GONE

    cluster.release_pod(NAMESPACE, "mc-42-0")
    assert [r.replica for r in gateway.observe().jobs["42"].replicas] == [1]


def test_a_terminating_pod_on_a_node_that_is_gone_is_gone(cluster, gateway) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request(replicas=1))
    cluster.set_pod_phase(NAMESPACE, "mc-42-0", "Running")
    cluster.terminate_pod(NAMESPACE, "mc-42-0")

    cluster.delete_node("gpu-a")

    (replica,) = gateway.observe().jobs["42"].replicas
    assert (replica.phase, replica.message) == (ReplicaPhase.GONE, "node gpu-a is gone")


# -- the manifest fallback ------------------------------------------------------------------------------------


def _save(directory: Path, step: int, size_bytes: int, saved_at: float) -> manifest.Entry:
    """What the job-side library leaves behind: the checkpoint file, then the manifest listing it."""
    directory.mkdir(parents=True, exist_ok=True)
    name = manifest.file_name(step)
    (directory / name).write_bytes(os.urandom(size_bytes))
    entries = [*manifest.read(directory)]
    entry = manifest.Entry(step=step, name=name, saved_at=saved_at, size_bytes=size_bytes, duration_s=1.5)
    manifest.write(directory, [*entries, entry])
    return entry


def test_the_manifest_fallback_fills_the_observation(cluster, tmp_path) -> None:
    cluster.add_node("gpu-a", H100)
    gateway = _gateway(cluster, checkpoint_root=str(tmp_path))
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    gateway.job_bind(request=_request("43", replicas=1))
    directory = tmp_path / NAMESPACE / "job-42"
    _save(directory, 1100, 2048, NOW - 700)
    newest = _save(directory, 1200, 4096, NOW - 100)

    jobs = gateway.observe().jobs

    observed = jobs["42"]
    assert observed.last_checkpoint_at == newest.saved_at
    assert observed.last_checkpoint_step == 1200
    assert observed.last_checkpoint_path == "/checkpoints/job-42/step-000001200.ckpt"  # as the pods see it
    none = jobs["43"]  # no manifest yet
    assert (none.last_checkpoint_at, none.last_checkpoint_step, none.last_checkpoint_path) == (None, None, "")


def test_a_checkpoint_whose_file_is_incomplete_is_skipped_for_the_one_before(cluster, tmp_path) -> None:
    cluster.add_node("gpu-a", H100)
    gateway = _gateway(cluster, checkpoint_root=str(tmp_path))
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    directory = tmp_path / NAMESPACE / "job-42"
    older = _save(directory, 1100, 2048, NOW - 700)
    _save(directory, 1200, 4096, NOW - 100)
    (directory / manifest.file_name(1200)).write_bytes(b"torn")  # not the size the manifest recorded

    observed = gateway.observe().jobs["42"]

    assert (observed.last_checkpoint_step, observed.last_checkpoint_at) == (1100, older.saved_at)


@pytest.mark.parametrize("damage", ["not json", '{"format": 1, "checkpoints": "all"}', '{"format": 99}'])
def test_a_damaged_manifest_yields_no_checkpoint(cluster, tmp_path, damage) -> None:
    cluster.add_node("gpu-a", H100)
    gateway = _gateway(cluster, checkpoint_root=str(tmp_path))
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    directory = tmp_path / NAMESPACE / "job-42"
    _save(directory, 1200, 4096, NOW - 100)
    (directory / manifest.MANIFEST).write_text(damage)

    observed = gateway.observe().jobs["42"]

    assert (observed.last_checkpoint_at, observed.last_checkpoint_step, observed.last_checkpoint_path) == (
        None,
        None,
        "",
    )


def test_an_unreadable_checkpoint_root_never_stops_observe(cluster, tmp_path, monkeypatch) -> None:
    cluster.add_node("gpu-a", H100)
    root = tmp_path / "root"
    gateway = _gateway(cluster, checkpoint_root=str(root))
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    (root / NAMESPACE).mkdir(parents=True)
    (root / NAMESPACE / "job-42").write_text("a file where the job's directory should be")

    assert gateway.observe().jobs["42"].last_checkpoint_at is None

    def broken(directory):  # whatever a failing volume raises (a stale NFS handle, a hung mount timing out)
        raise RuntimeError(f"{directory}: stale file handle")

    monkeypatch.setattr(manifest, "latest", broken)
    assert gateway.observe().jobs["42"].last_checkpoint_at is None


def test_without_a_root_no_manifest_is_read(cluster, gateway, tmp_path, monkeypatch) -> None:
    cluster.add_node("gpu-a", H100)
    gateway.namespace_ensure(namespace=NAMESPACE, team="nlp")
    gateway.job_bind(request=_request())
    monkeypatch.chdir(tmp_path)  # a relative root "" must not turn into the working directory
    _save(tmp_path / NAMESPACE / "job-42", 1200, 4096, NOW - 100)

    assert gateway.observe().jobs["42"].last_checkpoint_at is None


# -- through the scheduling loop ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_cycle_binds_a_checkpointed_job_with_its_credential_and_revokes_it_when_the_job_completes(cluster) -> None:
    no_wait = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)
    cluster.add_node("gpu-a", {**H100, "nvidia.com/mig.config": "all-disabled"}, allocatable={"nvidia.com/gpu": "8"})
    gateway = KubeGateway(cluster.new_api_client(), consistent_reads=True, namespace_create=True, sleep=lambda _s: None)
    gpu_models_sync()
    cluster_sync(observation=gateway.observe())
    team = team_seed()
    spec = {"kind": "training", "gpus": 2, "replicas": 2, "image": "ghcr.io/acme/train:1", "checkpoint_interval_s": 600}
    job = job_submit(team=team, spec=spec, actor=None, now=Clock().now)

    assert cycle_run(gateway=gateway, retry=no_wait).applied == [f"bind {job.pk}"]

    assert [c["metadata"]["name"] for c in cluster.claims(team.namespace)] == ["microcosm-checkpoints"]
    token = _token(cluster.secrets(team.namespace)[f"mc-{job.pk}-report"])
    assert token == job_token(job.pk) and job_for_token(token) == job
    assert set(cluster.services(team.namespace)) == {f"mc-{job.pk}"}  # the gang's rendezvous
    for pod in cluster.pods(team.namespace):
        assert _env(pod)["CHECKPOINT_DIR"] == f"/checkpoints/job-{job.pk}"
        assert {v["name"] for v in pod["spec"]["volumes"]} == {"checkpoints", "report-credential", "dshm"}

    for replica in (0, 1):
        cluster.set_pod_phase(team.namespace, f"mc-{job.pk}-{replica}", "Succeeded")
    cycle_run(gateway=gateway, retry=no_wait)

    job.refresh_from_db()
    assert job.state == "completed"
    assert cluster.secrets(team.namespace) == {} and cluster.pods(team.namespace) == []
    assert cluster.services(team.namespace) == {}  # gone with the job
    assert job_for_token(token) is None  # refused by the API too
