"""How the replicas of a multi-replica job find each other on Kubernetes, as plain JSON (no ``kubernetes``
import; docs/distributed-training.md; docs/gpu-facts.md, Running a multi-node training job on Kubernetes).

- The job gets a headless Service ``mc-<job>`` (``clusterIP: None``) selecting its pods, and every pod sets
  ``hostname`` = its own name and ``subdomain`` = the Service's, so replica ``r`` answers at
  ``mc-<job>-<r>.mc-<job>.<namespace>.svc``. The pods' DNS search path completes that name with the cluster
  domain, so no cluster-domain setting is needed. ``publishNotReadyAddresses`` lets replica 0's name resolve
  before its pod is Ready: the other replicas connect while it starts, not after.
- Every pod gets the Kubeflow PyTorchJob environment, one process per pod: ``MASTER_ADDR`` (replica 0's name),
  ``MASTER_PORT``, ``WORLD_SIZE`` (= replicas) and ``RANK`` (= replica), which ``torch.distributed``'s
  ``env://`` and Lightning's Kubeflow environment read as they are; and for ``torchrun``, one agent per pod
  starting one process per GPU, ``NNODES`` (= replicas), ``NODE_RANK`` (= replica) and ``NPROC_PER_NODE`` (the
  replica's GPUs, a MIG instance counting one). Under ``torchrun`` ``WORLD_SIZE`` and ``RANK`` count processes
  and torchrun sets them for its children itself.
- The same values under the names Kubeflow's training operator gives them (kubeflow/training-operator
  ``pkg/controller.v1/pytorch/envvar.go`` and ``master.go``: ``PET_NNODES`` = replicas, ``PET_NODE_RANK`` = the
  replica, ``PET_NPROC_PER_NODE``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``). ``torchrun`` reads every option it
  is not given from ``PET_<OPTION>`` (pytorch, ``env`` in torch.distributed's argparse_util module), so an image
  built for a PyTorchJob that runs a bare ``torchrun <script>`` joins one world of every pod instead of starting
  one world per pod on ``127.0.0.1``.
- Everything here follows from the job, its replica and its namespace only, so a requeued gang bound again on
  other nodes gets exactly the same rendezvous. A single-replica job gets none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.gateways.protocol import BindRequest, ReplicaPlacement

DEFAULT_PORT = 29500  # torch.distributed's and torchrun's own default MASTER_PORT
PORT_NAME = "rendezvous"


def service_name(job: str) -> str:
    return f"mc-{job}"


def replica_hostname(job: str, replica: int) -> str:
    """The pod's hostname: its own name (``mc-<job>-<replica>``, as :func:`pods.pod_name` names it)."""
    return f"mc-{job}-{replica}"


def replica_address(job: str, replica: int, namespace: str) -> str:
    """The DNS name replica ``replica`` of ``job`` answers at while its pod exists."""
    return f"{replica_hostname(job, replica)}.{service_name(job)}.{namespace}.svc"


def needs_rendezvous(request: BindRequest) -> bool:
    return len(request.placements) > 1


@dataclass(frozen=True, slots=True)
class PodRendezvous:
    """What one replica's pod gets: fields of its ``spec`` and variables of its environment (both empty for a
    single-replica job)."""

    spec: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)


def pod_rendezvous(request: BindRequest, placement: ReplicaPlacement, *, port: int = DEFAULT_PORT) -> PodRendezvous:
    """The hostname, subdomain and environment of ``placement``'s pod (module doc)."""
    if not needs_rendezvous(request):
        return PodRendezvous()
    replicas = len(request.placements)
    master = replica_address(request.job, 0, request.namespace)
    nproc = str(len(placement.devices))
    return PodRendezvous(
        spec={"hostname": replica_hostname(request.job, placement.replica), "subdomain": service_name(request.job)},
        env={
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(replicas),
            "RANK": str(placement.replica),
            "NNODES": str(replicas),
            "NODE_RANK": str(placement.replica),
            "NPROC_PER_NODE": nproc,
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": str(port),
            "PET_NNODES": str(replicas),
            "PET_NODE_RANK": str(placement.replica),
            "PET_NPROC_PER_NODE": nproc,
        },
    )


def service_manifest(
    request: BindRequest, *, selector: Mapping[str, str], labels: Mapping[str, str], port: int = DEFAULT_PORT
) -> dict[str, Any]:
    """The job's headless Service: ``selector`` picks exactly the job's pods; ``labels`` mark it as ours."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(request.job), "namespace": request.namespace, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector),
            "publishNotReadyAddresses": True,
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
