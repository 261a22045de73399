"""Microcosm's pods as plain JSON (no ``kubernetes`` import): the manifest of one replica, what a pod's
status means for the scheduler, and which GPU resources a pod holds.

A job's replica is one pod in its team's namespace, named ``mc-<job>-<replica>`` (``mc-<job>-g<generation>-<replica>``
with the label ``microcosm.io/generation`` once the job has been moved: a move starts the next generation's pods beside
the running ones, so both coexist until the old are released), created with
``schedulerName: microcosm`` so no other scheduler touches it, and bound with the ``pods/binding``
subresource. Its GPUs are ``nvidia.com/gpu: <n>`` or, under the GPU Operator's mixed strategy,
``nvidia.com/mig-<profile>: 1`` with ``+`` written ``.`` (``docs/gpu-facts.md``, MIG strategies and
resource names).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.gateways.kube.fabrics import ReplicaFabric, fabric_apply
from scheduler.gateways.kube.host_resources import HostResources, sidecar_resources
from scheduler.gateways.kube.labels import TOLERATED_TAINTS
from scheduler.gateways.kube.rendezvous import DEFAULT_PORT, pod_rendezvous
from scheduler.gateways.kube.shared_memory import shm_volume
from scheduler.gateways.kube.volumes import CHECKPOINT_CLAIM, REPORT_MOUNT, TOKEN_KEY, pod_volumes
from scheduler.gateways.protocol import BindRequest, Device, ReplicaObservation, ReplicaPhase, ReplicaPlacement

SCHEDULER_NAME = "microcosm"
MANAGED_BY = "app.kubernetes.io/managed-by"
JOB_LABEL = "microcosm.io/job"
REPLICA_LABEL = "microcosm.io/replica"
GENERATION_LABEL = "microcosm.io/generation"  # absent: 0, the job's bind
TEAM_LABEL = "microcosm.io/team"
PRIORITY_LABEL = "microcosm.io/priority"
DEVICES_ANNOTATION = "microcosm.io/devices"  # [[gpu, profile|null, start|null], ...]
JOB_NAME_ANNOTATION = "microcosm.io/job-name"
OUR_PODS = f"{MANAGED_BY}={SCHEDULER_NAME}"  # label selector

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# Pod failures that mean "lost with the node", not "the work failed": the job is requeued, not failed.
_LOST_REASONS = ("Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError")


def pod_name(job: str, replica: int, generation: int = 0) -> str:
    return f"mc-{job}-{replica}" if generation == 0 else f"mc-{job}-g{generation}-{replica}"


def generation_of(pod: Mapping[str, Any]) -> int:
    """The generation a pod of ours belongs to (its label; absent or damaged: 0, a bind's)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(GENERATION_LABEL, "0")
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def ready(pod: Mapping[str, Any]) -> bool:
    """The pod's ``Ready`` condition is ``True``: every container ready and every readiness gate met, as the
    kubelet's status manager computes and writes it (kubernetes pkg/kubelet/status/generate.go
    ``GeneratePodReadyCondition``, written by pkg/kubelet/status/status_manager.go). A terminating pod is never
    counted ready here: it is leaving."""
    if terminating(pod):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def mig_resource(profile: str) -> str:
    """``3g.40gb`` → ``nvidia.com/mig-3g.40gb``; ``1g.10gb+me`` → ``nvidia.com/mig-1g.10gb.me``."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def device_resources(devices: Iterable[Device]) -> dict[str, int]:
    """The extended resources one replica's devices take (whole GPUs, MIG instances by profile)."""
    counts: Counter[str] = Counter()
    for device in devices:
        counts[GPU_RESOURCE if device.mig_profile is None else mig_resource(device.mig_profile)] += 1
    return dict(sorted(counts.items()))


def format_devices(devices: Iterable[Device]) -> str:
    return json.dumps([[d.gpu, d.mig_profile, d.mig_start] for d in devices], separators=(",", ":"))


def parse_devices(text: str) -> tuple[Device, ...]:
    """The devices recorded on one of our pods; () when absent or damaged (then Kubernetes alone knows)."""
    try:
        rows = json.loads(text) if text else []
        return tuple(
            Device(gpu=int(gpu), mig_profile=None if p is None else str(p), mig_start=None if s is None else int(s))
            for gpu, p, s in rows
        )
    except (ValueError, TypeError):
        return ()


def pod_manifest(
    request: BindRequest,
    placement: ReplicaPlacement,
    *,
    team: str,
    image: str,
    grace_s: int,
    report_url: str = "",
    fabric: ReplicaFabric | None = None,
    rendezvous_port: int = DEFAULT_PORT,
    shm_size_limit: str | None = None,
    host: HostResources | None = None,
    generation: int = 0,
) -> dict[str, Any]:
    """The pod for one replica, as the API's JSON (camelCase). Not bound: ``nodeName`` is left out, the
    binding subresource sets it, so a half-created gang is visibly unbound and cleaned up.

    A checkpointed job (``checkpoint_dir`` set) mounts its team's checkpoint claim at ``/checkpoints``; a job
    with a ``credential`` mounts its report Secret (:mod:`scheduler.gateways.kube.volumes`), which the caller
    creates before the pod, and is told where to report (``report_url``, "": not told). A multi-node job's
    replica gets what its node's ``fabric`` needs (:mod:`scheduler.gateways.kube.fabrics`; None: nothing).

    Every pod mounts a memory-backed ``/dev/shm`` of ``shm_size_limit`` (None: no limit;
    :mod:`scheduler.gateways.kube.shared_memory`). With ``host`` (:mod:`scheduler.gateways.kube.host_resources`)
    the job's container requests that CPU and memory with limits equal to requests, shm is sized by it (its memory
    holds the shm), and every sidecar a fabric adds gets its own small requests = limits: the pod is Guaranteed.
    A replica of a multi-replica job also gets its rendezvous
    (:mod:`scheduler.gateways.kube.rendezvous`), whose headless Service the caller creates. ``generation`` above 0:
    the pod of a move (module doc), named and labelled with it."""
    rendezvous = pod_rendezvous(request, placement, port=rendezvous_port)
    replicas = len(request.placements)
    env = {
        **request.env,
        "CHECKPOINT_DIR": request.checkpoint_dir,
        "CHECKPOINT_INTERVAL_S": "" if request.checkpoint_interval_s is None else f"{request.checkpoint_interval_s:g}",
        "RESUME_FROM": request.resume_from,
        "MICROCOSM_JOB": request.job,
        "MICROCOSM_REPLICA": str(placement.replica),
        "MICROCOSM_REPLICAS": str(replicas),
        **rendezvous.env,
    }
    if request.credential:
        env["MICROCOSM_TOKEN_FILE"] = f"{REPORT_MOUNT}/{TOKEN_KEY}"
        if report_url:
            env["MICROCOSM_URL"] = report_url
    claim = (request.checkpoint_claim or CHECKPOINT_CLAIM) if request.checkpoint_dir else ""
    volumes, mounts = pod_volumes(request.job, claim=claim, credential=bool(request.credential))
    shm, shm_mount = shm_volume(host.shm_size_limit if host is not None else shm_size_limit)
    volumes, mounts = [*volumes, shm], [*mounts, shm_mount]
    resources = {name: str(count) for name, count in device_resources(placement.devices).items()}
    if host is not None:
        resources.update(host.container_resources())
    labels = {
        MANAGED_BY: SCHEDULER_NAME,
        JOB_LABEL: request.job,
        REPLICA_LABEL: str(placement.replica),
        PRIORITY_LABEL: request.priority,
    }
    if team:
        labels[TEAM_LABEL] = team
    if generation:
        labels[GENERATION_LABEL] = str(generation)
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "env": [{"name": name, "value": value} for name, value in env.items()],
        # Extended resources are never overcommitted: the request must equal the limit. CPU and memory too, so the
        # pod is Guaranteed (host_resources.pod_qos_class): the last the kubelet evicts under memory pressure.
        "resources": {"limits": dict(resources), "requests": dict(resources)},
    }
    if request.command:
        container["command"] = list(request.command)
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        **rendezvous.spec,
        # The scheduler decides what happens after a failure (requeue from a checkpoint, or fail).
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace_s,
        "containers": [container],
        "tolerations": [
            {"key": key, "operator": "Exists"} if value is None else {"key": key, "operator": "Equal", "value": value}
            for key, value in TOLERATED_TAINTS
        ],
    }
    if volumes:
        spec["volumes"] = volumes
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(request.job, placement.replica, generation),
            "namespace": request.namespace,
            "labels": labels,
            "annotations": {DEVICES_ANNOTATION: format_devices(placement.devices), JOB_NAME_ANNOTATION: request.name},
        },
        "spec": spec,
    }
    pod = fabric_apply(pod, fabric)
    if host is not None:
        for sidecar in spec.get("initContainers") or []:
            # qos.go counts init containers and native sidecars too: one without cpu and memory limits would make
            # the whole pod Burstable.
            sidecar.setdefault("resources", {"limits": sidecar_resources(), "requests": sidecar_resources()})
    return pod


def terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def finished(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def node_of(pod: Mapping[str, Any]) -> str | None:
    return pod.get("spec", {}).get("nodeName") or None


def replica_of(pod: Mapping[str, Any], live_nodes: set[str]) -> ReplicaObservation:
    """What one of our pods means for the scheduler (see :class:`ReplicaPhase`)."""
    meta = pod.get("metadata", {})
    status = pod.get("status") or {}
    node = node_of(pod)
    replica = int(meta.get("labels", {}).get(REPLICA_LABEL, "0"))
    devices = parse_devices(meta.get("annotations", {}).get(DEVICES_ANNOTATION, ""))

    generation, is_ready = generation_of(pod), ready(pod)

    def seen(phase: ReplicaPhase, message: str = "") -> ReplicaObservation:
        return ReplicaObservation(
            replica=replica,
            phase=phase,
            node=node,
            devices=devices,
            message=message,
            generation=generation,
            ready=is_ready and phase == ReplicaPhase.RUNNING,
        )

    if node is not None and node not in live_nodes:
        return seen(ReplicaPhase.GONE, f"node {node} is gone")
    phase = status.get("phase", "Pending")
    if terminating(pod):
        # Asked to stop (an eviction, a drain on a spot notice, a delete): while its process runs it has had
        # SIGTERM and may be saving a checkpoint within its grace. Once it has stopped, or if it never had a
        # node, nothing is left to wait for. Either way its exit code says nothing about the work: stopped, not
        # succeeded or failed.
        if node is not None and phase not in ("Succeeded", "Failed"):
            return seen(ReplicaPhase.STOPPING, "asked to stop; within its termination grace")
        return seen(ReplicaPhase.GONE, "the pod is being deleted")
    reason, message = status.get("reason", ""), status.get("message", "")
    if phase == "Succeeded":
        return seen(ReplicaPhase.SUCCEEDED)
    if phase == "Failed":
        if reason in _LOST_REASONS or reason.startswith("OutOf"):
            return seen(ReplicaPhase.GONE, f"{reason}: {message}".strip(": "))
        return seen(ReplicaPhase.FAILED, _failure(status) or f"{reason}: {message}".strip(": "))
    if phase == "Running":
        return seen(ReplicaPhase.RUNNING)
    if phase == "Unknown":
        return seen(ReplicaPhase.RUNNING, "the node stopped reporting this pod (phase Unknown)")
    if node is None:
        return seen(ReplicaPhase.PENDING, "not bound to a node yet")
    return seen(ReplicaPhase.BOUND, _waiting(status))


def _failure(status: Mapping[str, Any]) -> str:
    for container in status.get("containerStatuses") or []:
        done = (container.get("state") or {}).get("terminated")
        if done and done.get("exitCode", 0) != 0:
            detail = done.get("message") or done.get("reason") or ""
            return f"container {container.get('name')} exited with code {done.get('exitCode')} {detail}".strip()
    return ""


def _waiting(status: Mapping[str, Any]) -> str:
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
    return ""


def gpu_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The GPU resources a pod holds: the larger of its biggest init container and the sum of its
    containers, per resource, as the kubelet counts them."""
    spec = pod.get("spec", {})

    def of(container: Mapping[str, Any]) -> Counter[str]:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        return Counter(
            {
                name: int(str(value))
                for name, value in wanted.items()
                if name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)
            }
        )

    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        total += of(container)
    for init in spec.get("initContainers") or []:
        for name, value in of(init).items():
            total[name] = max(total[name], value)
    return dict(total)
