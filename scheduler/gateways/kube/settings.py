"""The Kubernetes backend's settings (``settings.KUBERNETES``): read from the environment and checked at start-up,
beside the gateway that uses them (docs/deploy.md lists every variable).

``portal/settings.py`` calls :func:`kubernetes_settings` once. The readers are the typed ones of
``scheduler/env.py``: a value they cannot accept, or one this module refuses, raises
:class:`~scheduler.env.EnvError` (an ``ImproperlyConfigured``) naming the variable, the junk and what would be
accepted, so a misconfigured deployment stops at start-up. Pure but for the environment it reads: ``environ``
(default: the process's) is the only input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypedDict

from scheduler.env import EnvError, env_bool, env_choice, env_float, env_int, env_list, env_str

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"


class KubernetesSettings(TypedDict):
    """``settings.KUBERNETES``: what the Kubernetes gateway is built from (``scheduler/gateways/kube/gateway.py``)."""

    topology_labels: list[str]
    gpu_operator_namespace: str
    mig_config_map: str
    mig_config_timeout_s: int
    mig_config_propagation_s: int
    mig_with_reboot: bool
    default_image: str
    checkpoint_storage_class: str
    checkpoint_size: str
    report_url: str
    checkpoint_root: str
    # Fabrics (scheduler/gateways/kube/fabrics.py, docs/deploy.md, Fabrics)
    rdma_resource: str
    placement_group_label: str
    nccl_ib_hca: str
    tcpx_daemon_image: str
    tcpxo_daemon_image: str
    gke_networks: list[str]
    rendezvous_port: int
    shm_fraction: float
    cpu_per_gpu: float
    host_memory_gib_per_gpu: float
    # Team namespaces (scheduler/gateways/kube/namespaces.py, docs/deploy.md, RBAC and Pod Security)
    namespace_create: bool
    pod_security_level: str
    pod_security_team_levels: dict[str, str]
    node_shutdown_grace_s: float
    cache_sync_timeout_s: int
    # On-demand capacity through the cloud's autoscaler (scheduler/gateways/kube/node_requests.py)
    node_requests: bool
    # Dynamic Resource Allocation: read the DRA drivers' ResourceSlices (scheduler/gateways/kube/dra_slices.py)
    dra: bool
    # The DeviceClass of a DRA node's fabric devices in claims (scheduler/gateways/kube/dra_claims.py)
    dra_fabric_class: str


def kubernetes_settings(environ: Mapping[str, str] | None = None) -> KubernetesSettings:
    """``settings.KUBERNETES`` from ``environ`` (default: the process's environment), checked (module doc)."""
    # Topology label keys from the top of the network to the bottom: of those a node carries, the lowest is its
    # leaf and the one above its spine (docs/gpu-facts.md, How Kubernetes exposes topology). Reconfigurations go through
    # the GPU Operator's MIG Manager with a mig-parted ConfigMap of ours in its namespace and a watchdog (~15 min,
    # doubled on reboot: docs/gpu-facts.md, MIG Manager reconfiguration flow).
    kube: KubernetesSettings = {
        "topology_labels": env_list(
            "KUBE_TOPOLOGY_LABELS",
            default=[
                "cloud.google.com/gce-topology-block",
                "cloud.google.com/gce-topology-subblock",
                "topology.k8s.aws/network-node-layer-1",
                "topology.k8s.aws/network-node-layer-2",
                "topology.k8s.aws/network-node-layer-3",
                "topology.k8s.aws/network-node-layer-4",
            ],
            environ=environ,
        ),
        "gpu_operator_namespace": env_str("GPU_OPERATOR_NAMESPACE", default="gpu-operator", environ=environ),
        "mig_config_map": env_str("MIG_CONFIG_MAP", default="microcosm-mig-config", environ=environ),
        "mig_config_timeout_s": env_int(
            "MIG_CONFIG_TIMEOUT_S", default=900, minimum=60, maximum=86400, environ=environ
        ),
        # How long MIG Manager may still see the previous mig-parted ConfigMap after a write: the kubelet refreshes a
        # mounted ConfigMap on its sync (--sync-frequency, 60 s) from a cache with a 60 s TTL (docs/deploy.md).
        "mig_config_propagation_s": env_int(
            "MIG_CONFIG_PROPAGATION_S", default=120, minimum=0, maximum=3600, environ=environ
        ),
        # MIG Manager runs with WITH_REBOOT=true: a MIG mode change may reboot the node, so its drain takes every
        # GPU pod.
        "mig_with_reboot": env_bool("MIG_WITH_REBOOT", default=False, environ=environ),
        "default_image": env_str("KUBE_DEFAULT_IMAGE", default="", environ=environ),
        # Each team namespace's checkpoint volume (docs/deploy.md, Checkpoint storage): a ReadWriteMany claim of this
        # storage class ("": the cluster's default class) and size, unless the team names a claim of its own.
        "checkpoint_storage_class": env_str("KUBE_CHECKPOINT_STORAGE_CLASS", default="", environ=environ),
        "checkpoint_size": env_str("KUBE_CHECKPOINT_SIZE", default="100Gi", environ=environ),
        # The portal's URL as the jobs' pods reach it, for their checkpoint reports; "": the pods are not told.
        "report_url": env_str("KUBE_REPORT_URL", default="", environ=environ),
        # Where this process sees the teams' checkpoint volumes as <root>/<namespace>/job-<id>/, to read the jobs'
        # manifests when their reports do not arrive; "": not mounted here.
        "checkpoint_root": env_str("KUBE_CHECKPOINT_ROOT", default="", environ=environ),
        # Fabrics for multi-node jobs (docs/deploy.md, Fabrics). EFA and GKE's A3 machine types are read without a
        # setting; InfiniBand/RoCE needs the RDMA resource the Network Operator's config names ("": none read). No
        # cloud labels a node's placement group in a standard way, so the label is the administrator's to name.
        "rdma_resource": env_str("KUBE_RDMA_RESOURCE", default="", environ=environ),
        "placement_group_label": env_str("KUBE_PLACEMENT_GROUP_LABEL", default="", environ=environ),
        "nccl_ib_hca": env_str("KUBE_NCCL_IB_HCA", default="", environ=environ),
        # GKE A3's receive-datapath daemons: their images are versioned with GKE's NCCL plugin, never guessed here.
        "tcpx_daemon_image": env_str("KUBE_TCPX_DAEMON_IMAGE", default="", environ=environ),
        "tcpxo_daemon_image": env_str("KUBE_TCPXO_DAEMON_IMAGE", default="", environ=environ),
        "gke_networks": env_list("KUBE_GKE_NETWORKS", default=[f"vpc{n}" for n in range(1, 9)], environ=environ),
        # A multi-replica job's MASTER_PORT (docs/distributed-training.md): torch.distributed's own default.
        "rendezvous_port": env_int("KUBE_RENDEZVOUS_PORT", default=29500, minimum=1, maximum=65535, environ=environ),
        # Each GPU pod's /dev/shm: this share of its node's memory per GPU, times the GPUs the pod holds.
        "shm_fraction": env_float("KUBE_SHM_FRACTION", default=0.5, minimum=0.0, maximum=1.0, environ=environ),
        # Each GPU pod's CPU and memory (requests = limits: Guaranteed QoS) when its job states none, per GPU it holds
        # (a MIG instance: its compute slices / 7); /dev/shm comes on top (docs/deploy.md, Pod resources).
        "cpu_per_gpu": env_float("KUBE_CPU_PER_GPU", default=8.0, minimum=0.1, maximum=1024.0, environ=environ),
        "host_memory_gib_per_gpu": env_float(
            "KUBE_HOST_MEMORY_GIB_PER_GPU", default=64.0, minimum=0.5, maximum=32768.0, environ=environ
        ),
        # Team namespaces are the platform's (manage.py team_namespaces | kubectl apply -f -); with this set, Microcosm
        # creates a missing one itself, which needs the opt-in grant of deploy/rbac.yaml (docs/deploy.md, RBAC).
        "namespace_create": env_bool("KUBE_NAMESPACE_CREATE", default=False, environ=environ),
        # The Pod Security level a team namespace enforces (docs/deploy.md, Pod Security), and the teams that need
        # another one, as team=level (GPUDirect-TCPX/TCPXO and InfiniBand gangs need "privileged").
        "pod_security_level": env_choice(
            "KUBE_POD_SECURITY_LEVEL", ("privileged", "baseline", "restricted"), default="baseline", environ=environ
        ),
        "pod_security_team_levels": {},
        # What the kubelet's graceful node shutdown gives ordinary pods (shutdownGracePeriod less
        # shutdownGracePeriodCriticalPods; GKE: 15 s): a shutdown notice's deadline, inside which the loop's eviction
        # grace is cut (docs/deploy.md, Spot notices).
        "node_shutdown_grace_s": env_float(
            "KUBE_NODE_SHUTDOWN_GRACE_S", default=15.0, minimum=1.0, maximum=3600.0, environ=environ
        ),
        # How long a read waits for the node and pod caches' first paged LIST (docs/deploy.md, Memory and API
        # traffic) before the cycle is retried.
        "cache_sync_timeout_s": env_int(
            "KUBE_CACHE_SYNC_TIMEOUT_S", default=120, minimum=5, maximum=3600, environ=environ
        ),
        # Autoscaled pools grow through the cluster's autoscaler: observe the node requests (ProvisioningRequests,
        # Karpenter placeholders) every cycle (docs/deploy.md, On-demand capacity through the cloud's autoscaler).
        "node_requests": env_bool("KUBE_NODE_REQUESTS", default=False, environ=environ),
        # GPUs or EFA interfaces are published through resource.k8s.io (the NVIDIA DRA driver, the EFA DRA driver):
        # watch the ResourceSlices (docs/deploy.md, Dynamic Resource Allocation (DRA) clusters).
        "dra": env_bool("KUBE_DRA", default=False, environ=environ),
        # The DeviceClass a DRA node's EFA interfaces are claimed in: EKS's aws-dranet chart installs
        # efa.networking.k8s.aws (kubernetes-sigs/dranet examples/aws_eks_examples/gpu-efa/device-class.yaml).
        "dra_fabric_class": env_str("KUBE_DRA_FABRIC_CLASS", default="efa.networking.k8s.aws", environ=environ),
    }
    for item in env_list("KUBE_POD_SECURITY_TEAM_LEVELS", default=[], environ=environ):
        team, sep, level = item.partition("=")
        if not sep or not team or level not in ("privileged", "baseline", "restricted"):
            raise EnvError(
                f"KUBE_POD_SECURITY_TEAM_LEVELS item {item!r} is not team=level: give a team's slug and one of "
                "privileged, baseline, restricted (nlp=privileged,cv=baseline)."
            )
        kube["pod_security_team_levels"][team] = level
    _check(kube)
    return kube


def _check(kube: KubernetesSettings) -> None:
    """Refuse values the readers' types let through but Kubernetes, NCCL or GKE would not accept."""
    if not re.fullmatch(_DNS_SUBDOMAIN, kube["dra_fabric_class"]):
        # A DeviceClass is named like any object (a DNS subdomain); a claim naming anything else is refused (422).
        raise EnvError(
            f"KUBE_DRA_FABRIC_CLASS={kube['dra_fabric_class']!r} is not a DeviceClass name: give the class your EFA or "
            "RDMA DRA driver installed (efa.networking.k8s.aws on EKS; kubectl get deviceclasses)."
        )
    if kube["shm_fraction"] <= 0:
        raise EnvError(
            f"KUBE_SHM_FRACTION={kube['shm_fraction']} must be above 0 and at most 1: the share of a node's memory "
            "per GPU that a pod's /dev/shm may use (0.5 is the default)."
        )
    for name, value in (
        ("GPU_OPERATOR_NAMESPACE", kube["gpu_operator_namespace"]),
        ("MIG_CONFIG_MAP", kube["mig_config_map"]),
    ):
        stripped = value.replace("-", "")
        if (
            len(value) > 63
            or not (stripped.isascii() and stripped.isalnum() and stripped == stripped.lower())
            or (value.startswith("-") or value.endswith("-"))
        ):
            raise EnvError(f"{name}={value!r} is not a Kubernetes name: use lowercase letters, digits and '-'.")
    storage_class = kube["checkpoint_storage_class"]
    if storage_class and (
        len(storage_class) > 253 or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", storage_class)
    ):
        raise EnvError(
            f"KUBE_CHECKPOINT_STORAGE_CLASS={storage_class!r} is not a storage class name: use lowercase letters, "
            "digits, '-' and '.' (kubectl get storageclass lists them), or leave it empty for the cluster's default "
            "class."
        )
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", kube["checkpoint_size"]) or not any(
        digit in "123456789" for digit in kube["checkpoint_size"]
    ):
        raise EnvError(
            f"KUBE_CHECKPOINT_SIZE={kube['checkpoint_size']!r} is not a storage size: give a Kubernetes quantity "
            "above zero such as 100Gi or 2Ti."
        )
    if kube["report_url"] and not kube["report_url"].startswith(("http://", "https://")):
        raise EnvError(
            f"KUBE_REPORT_URL={kube['report_url']!r} must start with http:// or https:// "
            "(http://microcosm-web.microcosm.svc)."
        )
    if kube["checkpoint_root"] and not kube["checkpoint_root"].startswith("/"):
        raise EnvError(
            f"KUBE_CHECKPOINT_ROOT={kube['checkpoint_root']!r} must be an absolute path (/mnt/checkpoints), or empty."
        )
    rdma = kube["rdma_resource"]
    if rdma and (
        not re.fullmatch(rf"{_DNS_SUBDOMAIN}/{_LABEL_NAME}", rdma)
        or rdma.split("/")[0].endswith("kubernetes.io")
        or rdma in ("nvidia.com/gpu", "vpc.amazonaws.com/efa")
    ):
        raise EnvError(
            f"KUBE_RDMA_RESOURCE={rdma!r} is not an RDMA extended resource name: give the <domain>/<name> the "
            "Network Operator's RDMA device plugin advertises (kubectl describe node lists it, e.g. "
            "rdma/rdma_shared_device_a), or leave it empty."
        )
    group_label = kube["placement_group_label"]
    if group_label and not re.fullmatch(rf"({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}", group_label):
        raise EnvError(
            f"KUBE_PLACEMENT_GROUP_LABEL={group_label!r} is not a node label key: give [prefix/]name such as "
            "eks.amazonaws.com/nodegroup, or leave it empty."
        )
    if kube["nccl_ib_hca"] and not re.fullmatch(r"[\^=]{0,2}[A-Za-z0-9_.:,-]+", kube["nccl_ib_hca"]):
        raise EnvError(
            f"KUBE_NCCL_IB_HCA={kube['nccl_ib_hca']!r} is not an NCCL_IB_HCA value: list HCAs as NCCL reads them "
            "(mlx5_0,mlx5_1 or =mlx5_0:1 or ^mlx5_2), without blanks."
        )
    for name, image in (
        ("KUBE_TCPX_DAEMON_IMAGE", kube["tcpx_daemon_image"]),
        ("KUBE_TCPXO_DAEMON_IMAGE", kube["tcpxo_daemon_image"]),
    ):
        if image and (not re.fullmatch(r"[a-z0-9][A-Za-z0-9._/:@-]*", image) or "://" in image):
            raise EnvError(
                f"{name}={image!r} is not a container image reference: give registry/repository:tag (no scheme, "
                "no blanks) as Google's GPUDirect guide for your GKE version names it, or leave it empty."
            )
    networks = kube["gke_networks"]
    for network in networks:
        if len(network) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", network) or network == "default":
            raise EnvError(
                f"KUBE_GKE_NETWORKS item {network!r} is not a GKE network name for an extra NIC: use the lowercase "
                "names of your Network objects (kubectl get networks), in NIC order; 'default' is eth0's and is not "
                "listed."
            )
    if len(set(networks)) != len(networks):
        raise EnvError(f"KUBE_GKE_NETWORKS={','.join(networks)!r} names a network twice: each NIC needs its own.")
