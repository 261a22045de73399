"""What a Kubernetes node's labels, taints and conditions say, as plain data (no ``kubernetes`` import).

Everything here is a pure function of strings, so :mod:`scheduler.gateways.kube.client` stays the only module that
talks to the API server and these rules can be tested without one. Sources (``docs/gpu-facts.md``): GPU Feature
Discovery and the GPU Operator (GPU Feature Discovery labels), topology labels (How Kubernetes exposes topology),
capacity types and spot taints (Spot and preemption signals).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, GPU_MODELS, LayoutError, validate_layout
from scheduler.core.model.snapshot import MigLayout
from scheduler.core.model.vocabulary import CapacityTier, Interconnect
from scheduler.core.sizing.layouts import named_layout, place_profiles
from scheduler.gateways.protocol import Interruption

# GPU Feature Discovery / GPU Operator (docs/gpu-facts.md, GPU Feature Discovery labels).
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_MEMORY = "nvidia.com/gpu.memory"
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_STRATEGY = "nvidia.com/mig.strategy"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
GPU_DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_FOR_MIG = "paused-for-mig-change"
_MIG_COUNT = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\.me)?)\.count$")

# Our own bookkeeping on the node (annotations: never used for selection, so they are free-form JSON).
MIG_LAYOUTS_ANNOTATION = "microcosm.io/mig-layouts"  # the per-GPU layouts last applied successfully

# Zone and topology labels (docs/gpu-facts.md, How Kubernetes exposes topology).
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_TOPOLOGY_LABELS: tuple[str, ...] = (
    # Ordered from the top of the fabric to the bottom; a node carries one provider's subset.
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/network-node-layer-4",
)

# Taints a Microcosm pod tolerates: the GPU taint clouds put on GPU pools and the spot-pool taints. The
# scheduler, not a taint, decides whether a job may run on spot capacity.
TOLERATED_TAINTS: tuple[tuple[str, str | None], ...] = (
    ("nvidia.com/gpu", None),  # any value
    ("kubernetes.azure.com/scalesetpriority", "spot"),
    ("cloud.google.com/gke-spot", "true"),
    # GKE's queued provisioning (class queued-provisioning.gke.io): its node pools' nodes carry
    # cloud.google.com/gke-queued=true:NoSchedule, and the pods that consume a request tolerate it (cloud.google.com
    # kubernetes-engine/docs/how-to/provisioningrequest). Only a ProvisioningRequest brings such a node
    # (NodePool.QueuedProvisioning), so tolerating it lets no work onto a node the engine did not ask for.
    ("cloud.google.com/gke-queued", "true"),
)

# Interruption signals (docs/gpu-facts.md, Spot and preemption signals): taint key → (source name, seconds of
# notice, None: unknown).
INTERRUPTION_TAINTS: Mapping[str, tuple[str, float | None]] = {
    "aws-node-termination-handler/spot-itn": ("spot-itn", 120.0),  # AWS gives 2 minutes
    "aws-node-termination-handler/scheduled-maintenance": ("scheduled-maintenance", None),
    "aws-node-termination-handler/asg-lifecycle-termination": ("asg-lifecycle-termination", None),
    "karpenter.sh/disrupted": ("karpenter-disrupted", None),
    "node.kubernetes.io/out-of-service": ("out-of-service", 0.0),
}


# Notices a node's conditions carry (docs/gpu-facts.md, Spot and preemption signals):
# - Kubernetes' graceful node shutdown: once the kubelet sees the machine shutting down (a GKE spot or preemptible
#   VM's preemption, a maintenance stop), its shutdown manager reports "node is shutting down"
#   (kubernetes/kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go, ShutdownStatus), which the
#   node's Ready condition carries (pkg/kubelet/nodestatus/setters.go, ReadyCondition: status False, reason
#   KubeletNotReady, the errors as its message). The kubelet then gives ordinary pods the shutdown grace period
#   less the critical pods' share: on GKE 15 s of the VM's 30 s (25 s of 30 on GKE up to 1.22.8-gke.200; up to
#   120 s in all on 1.35.0-gke.1171000 and later when configured; GKE docs, "Spot VMs" and "Preemptible VMs",
#   Graceful termination), and a larger terminationGracePeriodSeconds has no effect. The kubelet's
#   configuration is not on the node object, so that budget is a setting (KUBE_NODE_SHUTDOWN_GRACE_S).
# - Azure Scheduled Events on AKS: the Node Problem Detector AKS runs on every node (learn.microsoft.com
#   azure/aks/node-problem-detector) sets the condition PreemptionScheduled (status True, reason
#   SpotEvictionIncoming) when the instance metadata service publishes a Preempt event for a spot VM, and forwards
#   "<EventType> <EventStatus>[: <NotBefore>]. ..." as its message: "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02
#   GMT. For more information, see ... EventId: ...", "Preempt Started. ...", or the advisory "SpotRebalance
#   Recommendation Advisory" that reclaims nothing. Read as Azure's own Karpenter provider reads it
#   (Azure/karpenter-provider-azure, pkg/controllers/node/interruption: parseNotice). The broader VMEventScheduled
#   also covers Freeze, Reboot, Redeploy and Terminate, a few seconds' pause among them, so it is not a notice.
#   A Preempt whose NotBefore cannot be read gets Azure's minimum notice for Preempt, 30 s
#   (learn.microsoft.com azure/virtual-machines/linux/scheduled-events).
NODE_SHUTTING_DOWN = "node is shutting down"
NODE_SHUTDOWN = "node-shutdown"  # the notice's source
DEFAULT_SHUTDOWN_GRACE_S = 15.0  # GKE's share for ordinary pods (above)
AZURE_PREEMPT_CONDITION = "PreemptionScheduled"
AZURE_PREEMPT = "azure-preempt"  # the notice's source
AZURE_PREEMPT_NOTICE_S = 30.0
_AZURE_SCHEDULED = re.compile(r"^Preempt Scheduled:\s*([^.]*?\s(?:GMT|UTC))\s*(?:\.|$)")


@dataclass(frozen=True, slots=True)
class Condition:
    """A node condition as the API gives it (``status.conditions[]``)."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    since: float | None = None  # epoch seconds (lastTransitionTime), when known


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute
    added_at: float | None = None  # epoch seconds (the API's timeAdded), when known


def gpu_model_of(product: str, memory_mib: int | None = None) -> str | None:
    """The catalog model for a GFD ``nvidia.com/gpu.product`` value, or None when it is not in the catalog.

    GFD writes the driver's product name with blanks as dashes (``NVIDIA-H100-80GB-HBM3``), adds
    ``-MIG-<profile>`` under the single strategy and ``-SHARED`` for shared GPUs. The name is matched on
    its GPU class (A100/H100/H200), its form factor (``PCIe``, ``NVL``, otherwise SXM) and its memory: the
    size in the name, else ``nvidia.com/gpu.memory`` (MiB), whichever catalog size is nearest.
    """
    name = product.upper().removeprefix("NVIDIA-")
    name = re.sub(r"-SHARED$", "", name)
    name = re.sub(r"-MIG-.*$", "", name)
    gpu_class = next((c for c in ("A100", "H100", "H200") if c in name), None)
    if gpu_class is None:
        return None
    form = "PCIE" if "PCIE" in name else "NVL" if "NVL" in name else "SXM"
    sized = re.search(r"(\d+)GB", name)
    wanted_mib = int(sized.group(1)) * 1024 if sized else memory_mib
    candidates = [spec for spec in GPU_MODELS if spec.gpu_class == gpu_class and _form_of(spec.name) == form]
    if not candidates:
        return None
    if wanted_mib is None:
        return candidates[0].name if len(candidates) == 1 else None
    return min(candidates, key=lambda spec: abs(spec.memory_mib - wanted_mib)).name


def _form_of(model: str) -> str:
    upper = model.upper()
    return "PCIE" if "PCIE" in upper else "NVL" if "NVL" in upper else "SXM"


def interconnect_of(model: str) -> str:
    """SXM boards are NVSwitch-connected; NVL cards are bridged in pairs; PCIe cards talk over PCIe."""
    form = _form_of(model)
    if form == "SXM":
        return Interconnect.NVSWITCH.value
    return Interconnect.NVLINK_PAIRS.value if form == "NVL" else Interconnect.PCIE.value


def capacity_tier(labels: Mapping[str, str]) -> str:
    """``spot``, ``reserved`` or ``on-demand`` from the provider's capacity label, first match wins
    (``docs/gpu-facts.md``, Spot and preemption signals)."""
    karpenter = labels.get("karpenter.sh/capacity-type", "").lower()
    if karpenter in ("spot", "reserved", "on-demand"):
        return karpenter
    eks = labels.get("eks.amazonaws.com/capacityType", "").upper()
    if eks == "SPOT":
        return CapacityTier.SPOT.value
    if labels.get("cloud.google.com/gke-spot", "").lower() == "true":
        return CapacityTier.SPOT.value
    if labels.get("cloud.google.com/gke-preemptible", "").lower() == "true":
        return CapacityTier.SPOT.value
    if labels.get("kubernetes.azure.com/scalesetpriority", "").lower() == "spot":
        return CapacityTier.SPOT.value
    return CapacityTier.ON_DEMAND.value


def topology(labels: Mapping[str, str], keys: Sequence[str] = DEFAULT_TOPOLOGY_LABELS) -> tuple[str, str, str]:
    """``(zone, spine, leaf)`` of a node.

    ``keys`` lists topology label keys from the top of the network to the bottom. Of those the node
    carries, the lowest is its leaf and the one above its spine. The leaf is qualified by the spine
    (``spine/leaf``) because some providers name racks only within their block.
    """
    present = [labels[key] for key in keys if labels.get(key)]
    leaf = present[-1] if present else ""
    spine = present[-2] if len(present) >= 2 else ""
    return labels.get(ZONE_LABEL, ""), spine, f"{spine}/{leaf}" if spine else leaf


def tolerated(taint: Taint) -> bool:
    return any(taint.key == key and (value is None or taint.value == value) for key, value in TOLERATED_TAINTS)


def schedulable(*, cordoned: bool, ready: bool, taints: Sequence[Taint]) -> bool:
    """New work may bind: not cordoned, Ready, and no taint that repels our pods (PreferNoSchedule is a
    preference, not a ban)."""
    if cordoned or not ready:
        return False
    return not any(t.effect in ("NoSchedule", "NoExecute") and not tolerated(t) for t in taints)


def interruption_of(
    taints: Sequence[Taint],
    now: float,
    conditions: Sequence[Condition] = (),
    *,
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
) -> Interruption | None:
    """The earliest interruption notice among ``taints`` and ``conditions`` (``docs/gpu-facts.md``, Spot and
    preemption signals), or None. A graceful node shutdown's deadline is ``shutdown_grace_s`` after the kubelet
    reported it: the loop's eviction grace must end before the kubelet's own does."""
    notices = []
    for condition in conditions:
        noticed = condition.since if condition.since is not None else now
        if condition.type == "Ready" and condition.status != "True" and NODE_SHUTTING_DOWN in condition.message:
            notices.append(
                Interruption(noticed_at=noticed, deadline_at=noticed + shutdown_grace_s, source=NODE_SHUTDOWN)
            )
        elif condition.type == AZURE_PREEMPT_CONDITION and condition.status == "True":
            deadline = azure_preempt_deadline(condition.message, noticed)
            if deadline is not None:
                notices.append(Interruption(noticed_at=noticed, deadline_at=deadline, source=AZURE_PREEMPT))
    for taint in taints:
        known = INTERRUPTION_TAINTS.get(taint.key)
        if known is None:
            continue
        source, notice_s = known
        noticed = taint.added_at if taint.added_at is not None else now
        deadline = None if notice_s is None else noticed + notice_s
        notices.append(Interruption(noticed_at=noticed, deadline_at=deadline, source=source))
    return min(notices, key=lambda i: (i.noticed_at, i.source)) if notices else None


def azure_preempt_deadline(message: str, noticed: float) -> float | None:
    """When a spot VM goes, from the AKS Node Problem Detector's PreemptionScheduled message (module constants):
    its NotBefore; ``noticed`` for a Preempt already started; ``noticed`` + 30 s when the date cannot be read;
    None for the advisory rebalance recommendation, which reclaims nothing."""
    text = " ".join(message.split())
    if text.startswith("SpotRebalanceRecommendation Advisory"):
        return None
    if text.startswith("Preempt Started"):
        return noticed
    match = _AZURE_SCHEDULED.match(text)
    if match is None:
        return noticed + AZURE_PREEMPT_NOTICE_S
    try:
        return parsedate_to_datetime(match.group(1)).timestamp()
    except (TypeError, ValueError):
        return noticed + AZURE_PREEMPT_NOTICE_S


def mig_counts(labels: Mapping[str, str]) -> dict[str, int]:
    """Profile name → instances on the node, from GFD's mixed-strategy ``nvidia.com/mig-<p>.count`` labels.

    The label writes ``+`` as ``.`` (``mig-1g.10gb.me.count``); the profile name comes back with ``+``.
    """
    counts = {}
    for key, value in labels.items():
        match = _MIG_COUNT.match(key)
        if match and value.isdigit() and int(value) > 0:
            name = match.group(1)
            counts[name[: -len(".me")] + "+me" if name.endswith(".me") else name] = int(value)
    return counts


def layouts_counts(layouts: Sequence[MigLayout]) -> dict[str, int]:
    return dict(Counter(profile for layout in layouts for profile, _start in layout))


def current_mig(model: str, gpu_count: int, labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple:
    """The node's MIG layout per GPU index, from the best source that agrees with GFD's counts.

    1. the layouts Microcosm last applied (node annotation), if their instance counts are the node's;
    2. the GPU Operator config the node is labelled with (``all-3g.40gb`` …), applied to every GPU;
    3. the counts themselves, packed onto the GPUs largest instance first.

    The device plugin hands out any free instance of a profile, so a start slice here is bookkeeping: what
    matters is that every GPU's layout is legal and the counts are right. Non-MIG GPUs get ``()``.
    """
    spec = GPU_MODEL_BY_NAME.get(model)
    empty: tuple[MigLayout, ...] = tuple(() for _ in range(gpu_count))
    if spec is None or not spec.mig_capable or gpu_count <= 0:
        return empty
    counts = mig_counts(labels)
    applied = parse_layouts_annotation(annotations.get(MIG_LAYOUTS_ANNOTATION, ""), model, gpu_count)
    if applied is not None and layouts_counts(applied) == counts:
        return applied
    config = labels.get(MIG_CONFIG, "")
    if config:
        try:
            layout = named_layout(model, config)
        except LayoutError:
            pass
        else:
            named = tuple(layout for _ in range(gpu_count))
            if layouts_counts(named) == counts:
                return named
    return pack_counts(model, gpu_count, counts) or empty


def pack_counts(model: str, gpu_count: int, counts: Mapping[str, int]) -> tuple[MigLayout, ...] | None:
    """Spread ``counts`` instances over ``gpu_count`` GPUs, first fit, largest first; None if they don't fit."""
    profiles = GPU_MODEL_BY_NAME[model].profiles()
    if any(name not in profiles for name in counts):
        return None
    instances = sorted(
        (name for name, count in counts.items() for _ in range(count)),
        key=lambda n: (-profiles[n].memory_slices, -profiles[n].compute_slices, n),
    )
    per_gpu: list[list[str]] = [[] for _ in range(gpu_count)]
    for name in instances:
        for held in per_gpu:
            if place_profiles(model, [*held, name]) is not None:
                held.append(name)
                break
        else:
            return None
    return tuple(place_profiles(model, held) or () for held in per_gpu)


def format_layouts_annotation(layouts: Sequence[MigLayout]) -> str:
    return json.dumps([[[profile, start] for profile, start in layout] for layout in layouts], separators=(",", ":"))


def parse_layouts_annotation(text: str, model: str, gpu_count: int) -> tuple[MigLayout, ...] | None:
    """The layouts stored in one of our annotations, or None when absent, malformed or not legal for
    ``model`` (someone edited it by hand: fall back to what the labels say)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        if not isinstance(raw, list) or len(raw) != gpu_count:
            return None
        return tuple(tuple((str(p), int(s)) for p, s in validate_layout(model, layout)) for layout in raw)
    except (ValueError, TypeError, LayoutError):
        return None
