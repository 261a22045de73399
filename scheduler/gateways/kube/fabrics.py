"""The network fabric of a node and what a multi-node job's pods need to use it, as plain JSON (no ``kubernetes``).

A gang spread over nodes talks over the fabric its nodes offer, or over TCP on the primary interface when its
pods do not ask for it (``docs/gpu-facts.md, Running a multi-node training job on Kubernetes``): an EKS pod
that does not request ``vpc.amazonaws.com/efa`` gets no EFA, a GKE A3 pod without the extra NICs and the
receive-datapath daemon gets about 4 GB/s instead of hundreds. So the fabric is read from each node
(:func:`node_fabric`) and, for a job whose replicas span more than one node, written into its pods
(:func:`replica_fabric`, then :func:`fabric_apply`):

- **EFA** (AWS): the node's allocatable ``vpc.amazonaws.com/efa``; the pod requests its share of it and the
  huge pages libfabric registers its buffers in (``hugepages-2Mi``, with a memory request: the API server
  refuses huge pages without one), and gets ``FI_PROVIDER=efa``, ``FI_EFA_FORK_SAFE=1``,
  ``NCCL_SOCKET_IFNAME=^lo``.
- **InfiniBand / RoCE** (on-prem, Azure ND): the RDMA extended resource the NVIDIA Network Operator's config
  names (a setting, never a constant); the pod requests its share, gets ``IPC_LOCK`` and ``NCCL_IB_HCA``.
- **GPUDirect-TCPX / TCPXO** (GKE A3 High / Mega, from the instance-type label): the multi-NIC annotations,
  the receive-datapath daemon as a sidecar that sees the node's GPUs, the NCCL plugin's libraries from the
  host and the NCCL settings Google's manifests give the workload, as Google's NCCL test manifests for these
  machines lay them out. The node's NICs and its one daemon serve one workload, so a replica spanning such
  nodes holds all of its node's GPUs: the engine never plans less (``scheduler/core/placement/fabric.py``, rule 4)
  and a bind of less is refused here, never given a second daemon.

Single-node jobs are left alone: their GPUs talk over NVLink, and a fabric request would only hold devices
another job's gang may need.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.model.vocabulary import Fabric
from scheduler.errors import GatewayConflict
from scheduler.gateways.protocol import BindRequest, NodeObservation, ReplicaPlacement

EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# GKE A3 machine types → their GPUDirect fabric and how many NICs it adds to the primary one. A3 High runs
# GPUDirect-TCPX over 4 extra NICs, A3 Mega GPUDirect-TCPXO over 8 (Google's manifests for the two stacks).
GKE_MACHINE_FABRICS: Mapping[str, tuple[Fabric, int]] = {
    "a3-highgpu-8g": (Fabric.TCPX, 4),
    "a3-megagpu-8g": (Fabric.TCPXO, 8),
}
# The names of the GKE Network objects the extra NICs attach to, in order (Google's guides create vpc1..vpc8).
DEFAULT_GKE_NETWORKS: tuple[str, ...] = tuple(f"vpc{n}" for n in range(1, 9))

EFA_ENV: tuple[tuple[str, str], ...] = (
    ("FI_PROVIDER", "efa"),
    ("FI_EFA_FORK_SAFE", "1"),
    ("NCCL_SOCKET_IFNAME", "^lo"),
)
# AWS's EFA pods request 2 MiB huge pages beside the devices, paired with a memory request: the EKS user guide
# ("Run machine learning training on Amazon EKS with Elastic Fabric Adapter", docs.aws.amazon.com/eks/latest/
# userguide/node-efa.html) and aws-samples/aws-efa-eks's nccl-tests manifest ask hugepages-2Mi 5120Mi and memory
# 8000Mi; EFA instances pre-allocate 5128 such pages for libfabric. Kubernetes refuses a container asking huge
# pages without cpu or memory ("HugePages require cpu or memory", kubernetes/kubernetes
# pkg/apis/core/validation/validation.go), so the memory is requested too when the pod asks none, and only
# requested: a limit of AWS's test figure would kill a training job that needs more.
EFA_HUGEPAGES: tuple[str, str] = ("hugepages-2Mi", "5120Mi")
EFA_MEMORY_REQUEST = "8000Mi"
# GKE: where the node's NVIDIA libraries are (the NCCL plugin's too, once Google's installer DaemonSet has run)
# and where containers expect them.
GKE_NVIDIA_HOST_LIB = "/home/kubernetes/bin/nvidia/lib64"
NVIDIA_LIB_MOUNT = "/usr/local/nvidia/lib64"
TCPX_SOCKET_DIR = "/run/tcpx"  # the TCPX daemon's Unix sockets, shared with the job's container
TCPXO_APERTURE_DIR = "/dev/aperture_devices"
# The NCCL settings GPUDirect-TCPX needs in the job's container, as Google's NCCL test runs them
# (GoogleCloudPlatform/container-engine-accelerators, gpudirect-tcpx/nccl-config-latest.yaml, run-nccl.sh): eth0
# carries NCCL's bootstrap and control, the extra NICs the data (``NCCL_GPUDIRECTTCPX_SOCKET_IFNAME``, from the
# node's NIC count), and the CPU bindings are those of the a3-highgpu-8g's NICs.
TCPX_ENV: tuple[tuple[str, str], ...] = (
    ("NCCL_SOCKET_IFNAME", "eth0"),
    ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "eth0"),
    ("NCCL_CROSS_NIC", "0"),
    ("NCCL_ALGO", "Ring"),
    ("NCCL_PROTO", "Simple"),
    ("NCCL_NSOCKS_PERTHREAD", "4"),
    ("NCCL_SOCKET_NTHREADS", "1"),
    ("NCCL_MAX_NCHANNELS", "8"),
    ("NCCL_MIN_NCHANNELS", "8"),
    ("NCCL_DYNAMIC_CHUNK_SIZE", "524288"),
    ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
    ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
    ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
    ("NCCL_GPUDIRECTTCPX_TX_BINDINGS", "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177"),
    ("NCCL_GPUDIRECTTCPX_RX_BINDINGS", "eth1:22-35,124-139;eth2:22-35,124-139;eth3:74-87,178-191;eth4:74-87,178-191"),
    ("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "1000000"),
    ("NCCL_GPUDIRECTTCPX_FORCE_ACK", "0"),
    ("NCCL_GPUDIRECTTCPX_TX_COMPLETION_NANOSLEEP", "1000"),
    ("NCCL_NET_GDR_LEVEL", "PIX"),
    ("NCCL_P2P_PXN_LEVEL", "0"),
    ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", TCPX_SOCKET_DIR),
)
# GPUDirect-TCPXO's settings as the NCCL plugin's own profile exports them (nccl-env-profile.sh, which Google's
# installer puts beside the plugin; container-engine-accelerators gpudirect-tcpxo/README.md, "NCCL configs"),
# with the plugin's directory as mounted here. The profile also discovers the NIC names: a job that sources it
# (docs/deploy.md, Fabrics) gets the installed plugin's own values over these. CUDA_VISIBLE_DEVICES, which the
# profile also sets, is left to the device plugin.
TCPXO_ENV: tuple[tuple[str, str], ...] = (
    ("NCCL_LIB_DIR", NVIDIA_LIB_MOUNT),
    ("NCCL_SOCKET_IFNAME", "eth0"),
    ("NCCL_FASTRAK_CTRL_DEV", "eth0"),
    ("NCCL_CROSS_NIC", "0"),
    ("NCCL_PROTO", "Simple,LL128"),
    ("NCCL_MIN_NCHANNELS", "4"),
    ("NCCL_NVLSTREE_MAX_CHUNKSIZE", "131072"),
    ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
    ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
    ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
    ("NCCL_FASTRAK_NUM_FLOWS", "2"),
    ("NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL", "0"),
    ("NCCL_BUFFSIZE", "8388608"),
    ("NCCL_FASTRAK_USE_SNAP", "1"),
    ("NCCL_FASTRAK_USE_LLCM", "1"),
    ("NCCL_NET_GDR_LEVEL", "PIX"),
    ("NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING", "0"),
    ("NCCL_TUNER_PLUGIN", "libnccl-tuner.so"),
    ("NCCL_TUNER_CONFIG_PATH", f"{NVIDIA_LIB_MOUNT}/a3plus_tuner_config.textproto"),
    ("NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE", f"{NVIDIA_LIB_MOUNT}/a3plus_guest_config.textproto"),
    ("NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS", "600000"),
    ("NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", TCPXO_APERTURE_DIR),
    ("NCCL_DEBUG", "WARN"),
)
DAEMON_CONTAINER = "fabric-rxdm"
MAIN_CONTAINER = "main"


@dataclass(frozen=True, slots=True)
class FabricSettings:
    """What the cluster's administrator tells Microcosm about its fabrics (``settings.KUBERNETES``)."""

    rdma_resource: str = ""  # the RDMA extended resource ("rdma/<pool>"); "": no InfiniBand/RoCE is read
    placement_group_label: str = ""  # the node label naming a node's placement group; "": none
    nccl_ib_hca: str = ""  # NCCL_IB_HCA for InfiniBand pods; "": NCCL picks the HCAs itself
    tcpx_daemon_image: str = ""  # GPUDirect-TCPX receive-datapath daemon (tcpgpudmarxd) image
    tcpxo_daemon_image: str = ""  # GPUDirect-TCPXO receive-datapath daemon image
    gke_networks: tuple[str, ...] = DEFAULT_GKE_NETWORKS  # GKE networks for eth1, eth2, ...


NO_FABRIC_SETTINGS = FabricSettings()  # EFA and the GKE machine types are still read: they need no setting


@dataclass(frozen=True, slots=True)
class NodeFabric:
    """A node's fabric as read from the cluster (the :class:`NodeObservation` fields of the same names)."""

    fabric: Fabric = Fabric.TCP
    devices: int = 0
    placement_group: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaFabric:
    """What one replica's pod gets to use its node's fabric."""

    fabric: Fabric
    resources: Mapping[str, int] = field(default_factory=dict)  # extended resources, requested = limit
    quantities: Mapping[str, str] = field(default_factory=dict)  # other resources (huge pages), requested = limit
    requests: Mapping[str, str] = field(default_factory=dict)  # requested only, and only when the pod asks none
    env: tuple[tuple[str, str], ...] = ()
    capabilities: tuple[str, ...] = ()  # added to the job's container
    annotations: Mapping[str, str] = field(default_factory=dict)
    sidecars: tuple[dict[str, Any], ...] = ()  # native sidecars (init containers that keep running)
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()  # mounted into the job's container


def _count(value: object) -> int:
    """An allocatable count; 0 when absent or not a plain non-negative integer (a damaged value is no fabric)."""
    try:
        return max(int(str(value)), 0)
    except (TypeError, ValueError):
        return 0


def node_fabric(raw: Mapping[str, Any], settings: FabricSettings = NO_FABRIC_SETTINGS) -> NodeFabric:
    """The fabric a node offers, from its raw API object: EFA, else the RDMA resource of the settings, else a
    GKE A3 machine type, else TCP. Advertised devices win over the machine type: they are what a pod can get."""
    labels = (raw.get("metadata") or {}).get("labels") or {}
    allocatable = (raw.get("status") or {}).get("allocatable") or {}
    group = str(labels.get(settings.placement_group_label, "")) if settings.placement_group_label else ""
    efa = _count(allocatable.get(EFA_RESOURCE))
    if efa:
        return NodeFabric(Fabric.EFA, efa, group)
    rdma = _count(allocatable.get(settings.rdma_resource)) if settings.rdma_resource else 0
    if rdma:
        return NodeFabric(Fabric.INFINIBAND, rdma, group)
    machine = GKE_MACHINE_FABRICS.get(str(labels.get(INSTANCE_TYPE_LABEL, "")))
    if machine is not None:
        return NodeFabric(machine[0], machine[1], group)
    return NodeFabric(Fabric.TCP, 0, group)


def multi_node(request: BindRequest) -> bool:
    return len({p.node for p in request.placements}) > 1


def gang_fabric(request: BindRequest, nodes: Mapping[str, NodeObservation]) -> Fabric:
    """The one fabric a multi-node gang's nodes share; GatewayConflict when they differ. The engine never plans
    such a gang: this is the last guard, because pods of one collective cannot talk over two fabrics."""
    fabrics = {nodes[p.node].fabric for p in request.placements}
    if len(fabrics) > 1:
        offered = ", ".join(f"{name}: {nodes[name].fabric}" for name in sorted({p.node for p in request.placements}))
        raise GatewayConflict(f"job {request.job} spans nodes of different fabrics ({offered}); re-plan it on one")
    return Fabric(fabrics.pop())


def replica_fabric(
    request: BindRequest, placement: ReplicaPlacement, node: NodeObservation, settings: FabricSettings
) -> ReplicaFabric | None:
    """What ``placement``'s pod needs for its node's fabric; None for a single-node job or a node without one.
    GatewayConflict when the fabric needs a setting that is missing (the message names it)."""
    if not multi_node(request):
        return None
    fabric = Fabric(node.fabric)
    if fabric == Fabric.EFA:
        return ReplicaFabric(
            fabric,
            {EFA_RESOURCE: fabric_share(placement, node)},
            quantities=dict([EFA_HUGEPAGES]),
            requests={"memory": EFA_MEMORY_REQUEST},
            env=EFA_ENV,
        )
    if fabric == Fabric.INFINIBAND:
        if not settings.rdma_resource:  # the observation came from other settings
            return None
        env = (("NCCL_IB_HCA", settings.nccl_ib_hca),) if settings.nccl_ib_hca else ()
        return ReplicaFabric(
            fabric, {settings.rdma_resource: fabric_share(placement, node)}, env=env, capabilities=("IPC_LOCK",)
        )
    if fabric in (Fabric.TCPX, Fabric.TCPXO):
        gpus = len({device.gpu for device in placement.devices})
        whole = all(device.mig_profile is None for device in placement.devices) and gpus >= node.gpu_count
        if not whole:
            # The engine plans no such gang (scheduler/core/placement/fabric.py, rule 4); this is the last guard,
            # because a second daemon on the node would claim the same GPUs and NICs as the first.
            raise GatewayConflict(
                f"job {request.job} replica {placement.replica} holds {gpus} of the {node.gpu_count} GPUs of "
                f"{node.name}, a {fabric} node: a replica of a job spanning such nodes takes all of its node's GPUs "
                "(its NICs and receive-datapath daemon serve one workload); ask for replicas of a whole node"
            )
        return _gpudirect(request, fabric, node, settings)
    return None


def fabric_share(placement: ReplicaPlacement, node: NodeObservation) -> int:
    """The fabric devices a replica takes: all of them when it holds the whole node, else in proportion to the
    GPUs it holds (rounded down, at least one, so two half-node replicas never ask for more than there is)."""
    gpus = len({device.gpu for device in placement.devices})
    if node.gpu_count <= 0 or gpus >= node.gpu_count:
        return node.fabric_devices
    return max(node.fabric_devices * gpus // node.gpu_count, 1)


def _gpudirect(request: BindRequest, fabric: Fabric, node: NodeObservation, settings: FabricSettings) -> ReplicaFabric:
    """GKE A3: the extra NICs as multi-network interfaces, and the receive-datapath daemon beside the job."""
    tcpx = fabric == Fabric.TCPX
    setting, image = ("KUBE_TCPX_DAEMON_IMAGE", settings.tcpx_daemon_image)
    if not tcpx:
        setting, image = ("KUBE_TCPXO_DAEMON_IMAGE", settings.tcpxo_daemon_image)
    nics = node.fabric_devices
    if not image:
        raise GatewayConflict(
            f"job {request.job} spans {fabric} nodes but {setting} is not set: set it to the receive-datapath "
            "daemon image of your GKE version (docs/deploy.md, Fabrics), or run the job on one node"
        )
    if len(settings.gke_networks) < nics:
        raise GatewayConflict(
            f"job {request.job} spans {fabric} nodes with {nics} extra NICs but KUBE_GKE_NETWORKS names "
            f"{len(settings.gke_networks)} networks: list one GKE network per NIC (docs/deploy.md, Fabrics)"
        )
    interfaces = [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{n}", "network": network}
        for n, network in enumerate(settings.gke_networks[:nics], start=1)
    ]
    devices = [f"/dev/nvidia{gpu}" for gpu in range(node.gpu_count)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    if not tcpx:
        devices.append("/dev/dmabuf_import_helper")
    host = [
        _host_volume("fabric-nvidia-lib", GKE_NVIDIA_HOST_LIB),
        _host_volume("fabric-sys", "/sys"),
        _host_volume("fabric-proc-sys", "/proc/sys"),
    ]
    daemon_mounts = [
        {"name": "fabric-nvidia-lib", "mountPath": NVIDIA_LIB_MOUNT},
        {"name": "fabric-sys", "mountPath": "/hostsysfs"},
        {"name": "fabric-proc-sys", "mountPath": "/hostprocsysfs"},
    ]
    main_mounts = [{"name": "fabric-nvidia-lib", "mountPath": NVIDIA_LIB_MOUNT}]
    env = [("LD_LIBRARY_PATH", NVIDIA_LIB_MOUNT)]
    data_nics = ",".join(f"eth{n}" for n in range(1, nics + 1))
    if tcpx:
        host.append(_host_volume("fabric-tcpx-socket", TCPX_SOCKET_DIR))
        daemon_mounts.append({"name": "fabric-tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
        main_mounts.append({"name": "fabric-tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
        env += [*TCPX_ENV, ("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", data_nics)]
        command = [
            "/tcpgpudmarxd/build/app/tcpgpudmarxd",
            *("--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd", "--uds_path", TCPX_SOCKET_DIR),
        ]
        capabilities = ["NET_ADMIN"]
    else:
        host.append(_host_volume("fabric-aperture-devices", TCPXO_APERTURE_DIR))
        main_mounts.append({"name": "fabric-aperture-devices", "mountPath": TCPXO_APERTURE_DIR})
        env += [*TCPXO_ENV, ("NCCL_FASTRAK_IFNAME", data_nics)]
        command = [
            "/bin/sh",
            "-c",
            # The open-source daemon's flags (container-engine-accelerators gpudirect-tcpxo/README.md, Aug 21,
            # 2025: "--uid= --alsologtostderr" are obsolete).
            f"/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics={nics}",
        ]
        capabilities = ["NET_ADMIN", "NET_BIND_SERVICE"]
    daemon = {
        "name": DAEMON_CONTAINER,
        "image": image,
        "command": command,
        # A native sidecar: it starts before the job's container and stops when it ends, so the pod still
        # succeeds or fails with the job (a plain second container would keep it running forever).
        "restartPolicy": "Always",
        "securityContext": {"capabilities": {"add": capabilities}},
        "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB_MOUNT}],
        "volumeMounts": daemon_mounts,
    }
    annotations = {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces, separators=(",", ":")),
        f"devices.gke.io/container.{DAEMON_CONTAINER}": "".join(f"- path: {path}\n" for path in devices),
    }
    return ReplicaFabric(
        fabric,
        env=tuple(env),
        capabilities=("IPC_LOCK",) if tcpx else (),  # as Google's TCPX manifest gives the job's container
        annotations=annotations,
        sidecars=(daemon,),
        volumes=tuple(host),
        mounts=tuple(main_mounts),
    )


def _host_volume(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def fabric_apply(pod: dict[str, Any], fabric: ReplicaFabric | None) -> dict[str, Any]:
    """Add ``fabric``'s parts to a pod manifest built by :func:`scheduler.gateways.kube.pods.pod_manifest` (in
    place, and returned). The job's own environment wins over the fabric's defaults: a user who sets
    ``NCCL_SOCKET_IFNAME`` knows the image better than Microcosm does."""
    if fabric is None:
        return pod
    spec = pod["spec"]
    container = next(c for c in spec["containers"] if c["name"] == MAIN_CONTAINER)
    env = container.setdefault("env", [])
    present = {entry["name"] for entry in env}
    env.extend({"name": name, "value": value} for name, value in fabric.env if name not in present)
    resources = container.setdefault("resources", {})
    for kind in ("limits", "requests"):
        # Copies: a manifest may share one mapping between its requests and limits, and memory is asked in one only.
        resources[kind] = {**(resources.get(kind) or {}), **{name: str(n) for name, n in fabric.resources.items()}}
        resources[kind].update(fabric.quantities)
    for name, quantity in fabric.requests.items():
        if name not in resources["requests"] and name not in resources["limits"]:
            resources["requests"][name] = quantity
    if fabric.capabilities:
        added = container.setdefault("securityContext", {}).setdefault("capabilities", {}).setdefault("add", [])
        added.extend(c for c in fabric.capabilities if c not in added)
    if fabric.mounts:
        container.setdefault("volumeMounts", []).extend(fabric.mounts)
    if fabric.volumes:
        spec.setdefault("volumes", []).extend(fabric.volumes)
    if fabric.sidecars:
        spec.setdefault("initContainers", []).extend(fabric.sidecars)
    if fabric.annotations:
        pod["metadata"].setdefault("annotations", {}).update(fabric.annotations)
    return pod


def fabric_requests(pod: Mapping[str, Any], resources: Iterable[str]) -> dict[str, int]:
    """How many of the fabric ``resources`` a pod holds (its containers' requests or limits), for the
    gateway's check of what a node has left."""
    names = set(resources)
    held: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        asked = container.get("resources") or {}
        wanted = {**(asked.get("requests") or {}), **(asked.get("limits") or {})}
        for name, value in wanted.items():
            if name in names:
                held[name] = held.get(name, 0) + _count(value)
    return held
