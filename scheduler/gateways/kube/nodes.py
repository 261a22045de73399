"""Kubernetes objects as the scheduler reads them: pure functions on the API's raw JSON (plain dicts).

:class:`scheduler.gateways.kube.client.KubeClient` reads with ``_preload_content=False`` and the gateway hands
the dicts here: a node becomes a :class:`~scheduler.gateways.protocol.NodeObservation`, Microcosm's pods become
:class:`~scheduler.gateways.protocol.JobObservation` s, DCGM samples become utilization readings. Label, taint and pod
semantics live in :mod:`scheduler.gateways.kube.labels` and :mod:`scheduler.gateways.kube.pods`; the MIG flow's state in
:mod:`scheduler.gateways.kube.mig`. Nothing here talks to the API (only :mod:`scheduler.gateways.kube.client`
imports ``kubernetes``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, compute_fraction
from scheduler.core.model.vocabulary import Fabric, ReconfigurationMode
from scheduler.errors import GatewayConflict
from scheduler.gateways.kube.dra_mig import kept_layouts
from scheduler.gateways.kube.dra_slices import DraInventory
from scheduler.gateways.kube.fabrics import NO_FABRIC_SETTINGS, FabricSettings, node_fabric
from scheduler.gateways.kube.labels import (
    DEFAULT_SHUTDOWN_GRACE_S,
    GPU_COUNT,
    GPU_MEMORY,
    GPU_PRODUCT,
    Condition,
    Taint,
    capacity_tier,
    current_mig,
    gpu_model_of,
    interconnect_of,
    interruption_of,
    schedulable,
    topology,
)
from scheduler.gateways.kube.mig import CORDONED_BY_ADMIN, flow_of, mig_status
from scheduler.gateways.kube.pods import JOB_LABEL, replica_of
from scheduler.gateways.kube.prometheus import GpuSample
from scheduler.gateways.protocol import (
    Device,
    DeviceApi,
    JobObservation,
    NodeObservation,
    Observation,
    ReplicaPhase,
    UtilizationReading,
    device_check,
)

logger = logging.getLogger(__name__)


class ApiNotFound(Exception):
    """HTTP 404 from the API server (raised by ``KubeClient.call``; what it means depends on the call)."""


class ApiConflict(Exception):
    """HTTP 409: AlreadyExists on create, a stale resourceVersion on update, a pod already bound."""


def node_observation(
    raw: Mapping[str, Any],
    *,
    now: float,
    topology_labels: Sequence[str],
    mig_config_timeout_s: float,
    fabric_settings: FabricSettings = NO_FABRIC_SETTINGS,
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    dra: DraInventory | None = None,
) -> NodeObservation | None:
    """A GPU node as the scheduler sees it; None for nodes without GPUs or with a GPU the catalog lacks. Its
    fabric and placement group: :func:`scheduler.gateways.kube.fabrics.node_fabric`; its interruption notice,
    from its taints and conditions: :func:`scheduler.gateways.kube.labels.interruption_of` (a graceful
    shutdown's deadline ``shutdown_grace_s`` after the kubelet reported it).

    ``dra``: what the node's ResourceSlices publish (:mod:`scheduler.gateways.kube.dra_slices`). A node whose GPUs
    the NVIDIA DRA driver publishes is read from its slices, GFD labels or not (:func:`_gpus`); EFA interfaces the
    EFA DRA driver publishes make its fabric ``efa``. While a pool is incomplete or invalid no new work goes there:
    the node is left out when its GPUs are unknown, else observed unschedulable; either way the reason is logged.
    """
    labels, annotations = labels_of(raw), annotations_of(raw)
    gpus = _gpus(raw, labels, dra)
    if gpus is None:
        return None
    product, count, model, device_api, refusal = gpus
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    taints = [taint_of(t) for t in spec.get("taints") or []]
    conditions = [condition_of(c) for c in status.get("conditions") or []]
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    flow = flow_of(annotations, model, count)
    mig = mig_status(flow, labels, mig_config_timeout_s)
    interruption = interruption_of(taints, now, conditions, shutdown_grace_s=shutdown_grace_s)
    # Under the single strategy GFD renames the product "<model>-MIG-<profile>": its MIG devices are all
    # called nvidia.com/gpu, which cannot express a placement; Microcosm needs the mixed strategy.
    single = device_api == DeviceApi.DEVICE_PLUGIN and "-MIG-" in product.upper()
    zone, spine, leaf = topology(labels, topology_labels)
    fabric = node_fabric(raw, fabric_settings)
    if dra is not None and dra.efa_devices and fabric.fabric != Fabric.EFA:
        # The EFA DRA driver publishes the interfaces (no vpc.amazonaws.com/efa on the node): still EFA, not TCP.
        fabric = dataclasses.replace(fabric, fabric=Fabric.EFA, devices=dra.efa_devices)
    waiting = refusal or (dra.waiting if dra is not None else "")
    if waiting:
        logger.warning("node %s: no new work until %s", name_of(raw), waiting)
    layout = dra.mig if device_api == DeviceApi.DRA and dra is not None else None
    reconfiguration = ReconfigurationMode.RELABEL
    if layout is not None and dra is not None and dra.dynamic_mig:
        # Dynamic MIG: the instances exist only while claimed, so the layout is the one the engine chose, kept on the
        # node (scheduler.gateways.kube.dra_mig); without it, what the driver offers (dra_slices: whole GPUs, and a
        # MIG-enabled A100's one instance spanning it).
        layout = kept_layouts(annotations, dra) or layout
        fixed = dra.mig_only or dra.whole_only
        reconfiguration = ReconfigurationMode.DYNAMIC_FIXED_MODE if fixed else ReconfigurationMode.DYNAMIC
    return NodeObservation(
        name=name_of(raw),
        gpu_model=model,
        gpu_count=count,
        interconnect=interconnect_of(model),
        tier=capacity_tier(labels),
        leaf=leaf,
        spine=spine,
        zone=zone,
        mig=layout if layout is not None else current_mig(model, count, labels, annotations),
        schedulable=schedulable(cordoned=bool(spec.get("unschedulable")), ready=ready, taints=taints)
        and interruption is None
        and flow is None
        and mig.state == "success"
        and not single
        and not waiting,
        interruption=interruption,
        mig_status=mig,
        labels=dict(labels),
        fabric=str(fabric.fabric),
        fabric_devices=fabric.devices,
        placement_group=fabric.placement_group,
        cordoned_by_admin=CORDONED_BY_ADMIN in annotations,
        device_api=device_api.value,
        reconfiguration=reconfiguration.value,
    )


def _gpus(
    raw: Mapping[str, Any], labels: Mapping[str, str], dra: DraInventory | None
) -> tuple[str, int, str, DeviceApi, str] | None:
    """``(product, count, catalog model, device API, why no new work)`` of a node's GPUs; None (logged when it
    matters) for a node without GPUs the scheduler can use.

    One source per node, never both: the NVIDIA DRA driver "cannot be deployed alongside the standard GPU device
    plugin on the same node" (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/
    templates/validation.yaml). A device plugin registers ``nvidia.com/gpu`` in the node's capacity; a DRA node has
    none (even a DeviceClass's ``extendedResourceName``, KEP-5004, is served by the scheduler, not the node). If both
    appear, the two components may hand the same GPU to two pods: the node is read once, as the device plugin's
    (whose pods Microcosm may already run there), and takes no new work until one of them is removed. A plugin that
    has gone leaves ``nvidia.com/gpu: 0`` in the capacity (kubernetes pkg/kubelet/nodestatus/setters.go
    ``MachineInfo`` zeroes the device manager's removed resources): no device plugin.
    """
    name = name_of(raw)
    plugin_count = int_or_none((raw.get("status") or {}).get("capacity", {}).get("nvidia.com/gpu"))
    if dra is not None and dra.gpu_pool and not plugin_count:
        if not dra.gpu_count:  # the pool is incomplete, invalid or unreadable: its size is not known yet
            logger.warning("node %s: its DRA GPUs are not counted until %s", name, dra.waiting)
            return None
        assert dra.gpu_model is not None  # a complete GPU pool names a catalog model (dra_slices._gpu_reading)
        return dra.product, dra.gpu_count, dra.gpu_model, DeviceApi.DRA, ""
    product = labels.get(GPU_PRODUCT, "")
    count = int_or_none(labels.get(GPU_COUNT)) or plugin_count
    if not product or not count:
        return None
    model = gpu_model_of(product, int_or_none(labels.get(GPU_MEMORY)))
    if model is None:
        logger.warning("node %s: GPU %r is not in the catalog; the scheduler leaves it alone", name, product)
        return None
    refusal = ""
    if dra is not None and dra.gpu_pool:
        refusal = (
            "one of the GPU device plugin (nvidia.com/gpu in its capacity) and the NVIDIA DRA driver (its "
            "ResourceSlices) is removed: both publish its GPUs and cannot run on one node"
        )
    return product, count, model, DeviceApi.DEVICE_PLUGIN, refusal


def utilization_readings(samples: Iterable[GpuSample], observation: Observation) -> tuple[UtilizationReading, ...]:
    """Engine activity per observed node from DCGM samples: MIG instances weigh their compute share of the GPU
    (compute slices / 7), samples of unknown nodes or profiles are ignored; allocation from the bound pods."""
    models = {node.name: node.gpu_model for node in observation.nodes}
    busy: dict[str, float] = {}
    for sample in samples:
        model = models.get(sample.node)
        if model is None:
            continue
        weight = 1.0
        if sample.instance is not None:
            if sample.profile is None or sample.profile not in GPU_MODEL_BY_NAME[model].profiles():
                continue
            weight = compute_fraction(model, sample.profile)
        busy[sample.node] = busy.get(sample.node, 0.0) + weight * sample.engine_active
    held: dict[str, float] = {}
    for job in observation.jobs.values():
        for replica in job.replicas:
            if replica.phase in (ReplicaPhase.RUNNING, ReplicaPhase.BOUND) and replica.node in models:
                held[replica.node] = held.get(replica.node, 0.0) + gpu_units(models[replica.node], replica.devices)
    return tuple(
        UtilizationReading(
            node=node.name,
            gpu_class=GPU_MODEL_BY_NAME[node.gpu_model].gpu_class,
            gpus=float(node.gpu_count),
            allocated_gpus=round(held.get(node.name, 0.0), 6),
            busy_ratio=round(min(busy.get(node.name, 0.0) / node.gpu_count, 1.0), 6),
        )
        for node in observation.nodes
    )


# -- small helpers on raw JSON -------------------------------------------------------------------------------


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _epoch(value: object) -> float | None:
    """An API timestamp (RFC 3339) as epoch seconds; None when absent or unreadable."""
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() if value else None
    except ValueError:
        return None


def taint_of(raw: Mapping[str, Any]) -> Taint:
    return Taint(
        key=raw.get("key", ""),
        value=raw.get("value") or "",
        effect=raw.get("effect", ""),
        added_at=_epoch(raw.get("timeAdded")),
    )


def condition_of(raw: Mapping[str, Any]) -> Condition:
    return Condition(
        type=str(raw.get("type", "")),
        status=str(raw.get("status", "")),
        reason=str(raw.get("reason") or ""),
        message=str(raw.get("message") or ""),
        since=_epoch(raw.get("lastTransitionTime")),
    )


def gpu_units(model: str, devices: Iterable[Device]) -> float:
    return sum(1.0 if d.mig_profile is None else compute_fraction(model, d.mig_profile) for d in devices)


def check_device(
    node: NodeObservation, device: Device, held: set[tuple[int, int | None]], wanted: set[tuple[str, int, int | None]]
) -> None:
    where = f"{node.name} GPU {device.gpu}"
    if not 0 <= device.gpu < node.gpu_count:
        raise GatewayConflict(f"{where} does not exist")
    layout = node.mig[device.gpu] if device.gpu < len(node.mig) else ()
    key = (node.name, device.gpu, device.mig_start)
    if key in wanted or (node.name, device.gpu, None) in wanted:
        raise GatewayConflict(f"{where} is asked for twice in one request")
    device_check(where, device, layout, held)
    wanted.add(key)


def jobs_of(pods: Iterable[Mapping[str, Any]], live_nodes: set[str]) -> dict[str, JobObservation]:
    by_job: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        job = labels_of(pod).get(JOB_LABEL)
        if job:
            by_job.setdefault(job, []).append(pod)
    return {
        job: JobObservation(
            job=job,
            namespace=str(found[0]["metadata"].get("namespace", "")),
            replicas=tuple(sorted((replica_of(p, live_nodes) for p in found), key=lambda r: (r.generation, r.replica))),
        )
        for job, found in sorted(by_job.items())
    }
