"""The MIG reconfiguration flow on Kubernetes, as pure decisions (no ``kubernetes`` import).

The GPU Operator's MIG Manager reconfigures a node when its ``nvidia.com/mig.config`` label changes value,
using a mig-parted config from a ConfigMap (``docs/gpu-facts.md``, mig-parted config format, GPU Operator
default configs, MIG Manager reconfiguration flow). It does not evict user pods, so Microcosm drives
the flow and keeps its progress on the node itself, in annotations, so any worker can pick it up:

``draining``
    :meth:`scheduler.gateways.kube.gateway.KubeGateway.node_reconfigure` wrote the config, cordoned the node and asked
    the remaining GPU pods to go; once none is left and MIG Manager can see the config, the label is set and the phase
    moves on.
``applying``
    MIG Manager works; ``nvidia.com/mig.config.state`` goes ``pending`` → ``success`` (or ``rebooting``,
    ``failed``). Success counts only once GFD's ``mig-<profile>.count`` labels show the new instances: the
    state label still reads the *previous* run's ``success`` for a moment after the relabel.
``failed``
    MIG Manager failed, the drain or the change timed out, or the known wedge (state stuck in ``pending``
    with the operator's clients paused: ``docs/gpu-facts.md``, MIG Manager reconfiguration
    flow) survived its recoveries. The node stays cordoned.

**Propagation.** MIG Manager reads the config from the ConfigMap mounted as a volume (the GPU Operator sets
``CONFIG_FILE=/mig-parted-config/config.yaml``; NVIDIA/gpu-operator ``controllers/object_controls.go``), and the
kubelet refreshes a mounted ConfigMap only on its periodic pod sync, from a cache with a TTL (kubelet
``--sync-frequency`` 60 s, cache TTL 60 s: kubernetes/kubernetes ``pkg/kubelet/util/manager/cache_based_manager.go``).
MIG Manager's first step asserts the config name is in that file, else ``failed`` (NVIDIA/mig-parted
``pkg/mig/reconfigure/reconfigure.go``). So the label moves only once the name has been in the ConfigMap for the
propagation delay (``MIG_CONFIG_PROPAGATION_S``); a name written long ago needs no wait. A ``failed`` within that
much of a fresh write is retried once, after another delay, before the change is declared failed.

This module decides; :mod:`scheduler.gateways.kube.mig_flow` carries the decisions out against the API.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import yaml

from scheduler.core.gpus.catalog import GPU_MODELS
from scheduler.core.model.snapshot import MigLayout
from scheduler.core.sizing.layouts import named_layout, named_layouts
from scheduler.gateways.kube.labels import (
    GPU_DEPLOY_PREFIX,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    PAUSED_FOR_MIG,
    format_layouts_annotation,
    layouts_counts,
    mig_counts,
    parse_layouts_annotation,
)
from scheduler.gateways.protocol import MigConfigState, MigStatus

# The key ClusterPolicy spec.migManager.config expects (docs/gpu-facts.md, GPU Operator default configs).
CONFIG_KEY = "config.yaml"
CONFIG_PREFIX = "microcosm-"
# On the ConfigMap: when Microcosm first wrote each config name (JSON name → epoch seconds), so a flow knows
# whether MIG Manager's mounted copy can already hold it (module doc, "Propagation").
ADDED_ANNOTATION = "microcosm.io/mig-config-added"

# PCI device IDs ("0x<device><vendor>") per catalog memory family, as the GPU Operator's default ConfigMap
# filters its entries (NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml, the device-filter of
# all-balanced): one config name then serves a mixed fleet.
DEVICE_FILTERS: Mapping[str, tuple[str, ...]] = {
    # A100-40GB, A800-40GB
    "40gb": ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
    # H100-80GB, H800-80GB, A100-80GB, A800-80GB
    "80gb": (
        "0x233010DE",
        "0x233110DE",
        "0x232210DE",
        "0x20B210DE",
        "0x20B510DE",
        "0x20F310DE",
        "0x20F510DE",
        "0x232410DE",
    ),
    # H100 NVL, H800 NVL
    "94gb": ("0x232110DE", "0x233A10DE"),
    # H200 141GB, H200 NVL
    "141gb": ("0x233510DE", "0x233B10DE"),
}


def operator_configs() -> dict[str, list[dict[str, object]]]:
    """The configs the GPU Operator would offer for the catalog's GPUs: ``all-disabled``, ``all-enabled``, one
    ``all-<profile>`` per profile at its maximum count and ``all-balanced`` (``docs/gpu-facts.md``, GPU Operator
    default configs), each in every memory family's own sizes.

    Pointing ClusterPolicy at Microcosm's ConfigMap replaces the operator's, and the MIG Manager DaemonSet's roll
    re-applies every node's current label: a node labelled ``all-3g.40gb`` must find that name here or it goes
    ``failed`` and stays cordoned. A name that means the same counts on every family that has it is one
    ``devices: all`` entry; one that differs (``all-1g.10gb``: 4 instances on A100-40GB, 7 on 80 GB parts;
    ``all-balanced``) has an entry per family with its ``device-filter``, as the operator's default ConfigMap does.
    """
    per_name: dict[str, dict[str, dict[str, int]]] = {}
    for spec in GPU_MODELS:
        if spec.mig_family is None:
            continue
        for name in named_layouts(spec.name):
            if name in ("all-disabled", "all-enabled"):
                continue
            counts = dict(sorted(Counter(p for p, _start in named_layout(spec.name, name)).items()))
            per_name.setdefault(name, {})[spec.mig_family] = counts
    configs: dict[str, list[dict[str, object]]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for name, by_family in sorted(per_name.items()):
        if len({json.dumps(c) for c in by_family.values()}) == 1:
            configs[name] = [{"devices": "all", "mig-enabled": True, "mig-devices": next(iter(by_family.values()))}]
            continue
        configs[name] = [
            {
                "device-filter": list(DEVICE_FILTERS[family]),
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": counts,
            }
            for family, counts in by_family.items()
        ]
    return configs


PHASE = "microcosm.io/mig-phase"
DESIRED = "microcosm.io/mig-desired"  # per-GPU layouts asked for (JSON)
DESIRED_CONFIG = "microcosm.io/mig-desired-config"  # the mig-parted config name for them
SINCE = "microcosm.io/mig-since"  # epoch seconds the current phase (or recovery) began
RECOVERIES = "microcosm.io/mig-recoveries"
REASON = "microcosm.io/mig-reason"  # why the flow failed, for operators
CORDONED_BY_US = "microcosm.io/cordoned-for-mig"  # present: we cordoned it, so we uncordon it
# Present: Microcosm cordoned the node for an admin's cordon or drain (scheduler.node_states), and lifts it when the
# admin marks the node ready (KubeGateway.node_cordon).
CORDONED_BY_ADMIN = "microcosm.io/cordoned-by-admin"
VISIBLE_AT = "microcosm.io/mig-config-visible-at"  # epoch seconds from which MIG Manager can see the config
RETRIES = "microcosm.io/mig-retries"  # relabels again after a failure soon after a config write (module doc)
FLOW_ANNOTATIONS = (PHASE, DESIRED, DESIRED_CONFIG, SINCE, RECOVERIES, REASON, VISIBLE_AT, RETRIES)
# Retries of a change that failed soon after its config was written (module doc, "Propagation").
MAX_RETRIES = 1

# Wedge recoveries (the remedy in docs/gpu-facts.md, MIG Manager reconfiguration flow) before the change is
# declared failed.
MAX_RECOVERIES = 2


class Phase(StrEnum):
    DRAINING = "draining"
    APPLYING = "applying"
    FAILED = "failed"


class Step(StrEnum):
    """What :meth:`scheduler.gateways.kube.gateway.KubeGateway.mig_watch` does next for one node."""

    WAIT = "wait"
    RELABEL = "relabel"  # drained: set nvidia.com/mig.config
    SUCCEED = "succeed"  # the new layout is live: record it and uncordon
    RECOVER = "recover"  # stuck in pending: restore the deploy labels and restart MIG Manager
    RETRY = "retry"  # failed soon after the config was written: drain and relabel once more, after a propagation
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Flow:
    """A node's MIG flow as its annotations record it; None fields: the node has no flow."""

    phase: Phase
    desired: tuple[MigLayout, ...]
    config: str
    since: float
    recoveries: int = 0
    reason: str = ""
    visible_at: float = 0.0  # MIG Manager's mounted copy holds the config from then on (module doc)
    retries: int = 0


def config_name(layouts: Sequence[MigLayout]) -> str:
    """A stable mig-parted config name for per-GPU layouts; it depends on the instance counts per GPU only,
    because mig-parted takes counts and picks the placements itself."""
    counts = [sorted(Counter(profile for profile, _start in layout).items()) for layout in layouts]
    digest = hashlib.sha256(json.dumps(counts).encode()).hexdigest()[:12]
    return CONFIG_PREFIX + digest


def same_counts_per_gpu(a: Sequence[MigLayout], b: Sequence[MigLayout]) -> bool:
    return [Counter(p for p, _ in layout) for layout in a] == [Counter(p for p, _ in layout) for layout in b]


def config_entries(layouts: Sequence[MigLayout]) -> list[dict[str, object]]:
    """mig-parted entries (``docs/gpu-facts.md``, mig-parted config format) for per-GPU layouts: GPUs with equal
    counts share one entry."""
    groups: dict[str, tuple[list[int], dict[str, int]]] = {}
    for index, layout in enumerate(layouts):
        counts = dict(sorted(Counter(profile for profile, _start in layout).items()))
        key = json.dumps(counts)
        groups.setdefault(key, ([], counts))[0].append(index)
    entries: list[dict[str, object]] = []
    for devices, counts in groups.values():
        entry: dict[str, object] = {"devices": devices, "mig-enabled": bool(counts)}
        if counts:
            entry["mig-devices"] = counts
        entries.append(entry)
    return entries


def config_document(existing: str, name: str, layouts: Sequence[MigLayout], keep: set[str]) -> str:
    """The ConfigMap's ``config.yaml`` with config ``name`` for ``layouts`` added (``""``: none, only the
    operator's names made sure of).

    Microcosm's earlier configs survive only if a node still uses them (``keep``), so the document does not
    grow without bound; other configs someone added by hand are kept as they are, and every name the operator
    would have offered (:func:`operator_configs`) is there.
    """
    try:
        parsed = yaml.safe_load(existing) if existing else None
    except yaml.YAMLError:
        parsed = None
    configs = parsed.get("mig-configs") if isinstance(parsed, dict) else None
    configs = dict(configs) if isinstance(configs, dict) else {}
    configs = {k: v for k, v in configs.items() if not str(k).startswith(CONFIG_PREFIX) or k in keep}
    for base, entries in operator_configs().items():
        configs.setdefault(base, entries)
    if name:
        configs[name] = config_entries(layouts)
    return yaml.safe_dump({"version": "v1", "mig-configs": dict(sorted(configs.items()))}, sort_keys=False)


def config_names(document: str) -> set[str]:
    """The config names a ``config.yaml`` offers (none when it does not parse, as mig-parted would refuse it)."""
    try:
        parsed = yaml.safe_load(document) if document else None
    except yaml.YAMLError:
        return set()
    configs = parsed.get("mig-configs") if isinstance(parsed, dict) else None
    return {str(k) for k in configs} if isinstance(configs, dict) else set()


def added_times(previous: str, before: set[str], after: set[str], now: float) -> dict[str, float]:
    """The ConfigMap's :data:`ADDED_ANNOTATION` after a write that took its names from ``before`` to ``after``:
    new names are dated ``now``, names that stay keep their date (none recorded: there long ago), gone ones go."""
    try:
        known = json.loads(previous) if previous else {}
    except ValueError:
        known = {}
    known = known if isinstance(known, dict) else {}
    dates: dict[str, float] = {}
    for name in sorted(after):
        if name not in before:
            dates[name] = now
        elif isinstance(known.get(name), int | float):
            dates[name] = float(known[name])
    return dates


def flow_of(annotations: Mapping[str, str], model: str, gpu_count: int) -> Flow | None:
    """The flow recorded on a node, or None (no flow, or annotations too damaged to act on)."""
    try:
        phase = Phase(annotations.get(PHASE, ""))
    except ValueError:
        return None
    desired = parse_layouts_annotation(annotations.get(DESIRED, ""), model, gpu_count)
    config = annotations.get(DESIRED_CONFIG, "")
    try:
        since = float(annotations.get(SINCE, ""))
        recoveries = int(annotations.get(RECOVERIES, "0"))
        visible_at = float(annotations.get(VISIBLE_AT, "0"))
        retries = int(annotations.get(RETRIES, "0"))
    except ValueError:
        return None
    if desired is None or not config:
        return None
    return Flow(phase, desired, config, since, recoveries, annotations.get(REASON, ""), visible_at, retries)


def flow_annotations(flow: Flow) -> dict[str, str]:
    return {
        PHASE: flow.phase.value,
        DESIRED: format_layouts_annotation(flow.desired),
        DESIRED_CONFIG: flow.config,
        SINCE: repr(flow.since),
        RECOVERIES: str(flow.recoveries),
        REASON: flow.reason,
        VISIBLE_AT: repr(flow.visible_at),
        RETRIES: str(flow.retries),
    }


def paused_deploy_labels(labels: Mapping[str, str]) -> list[str]:
    """The operator deploy labels MIG Manager left at ``paused-for-mig-change`` (the wedge's signature)."""
    return sorted(k for k, v in labels.items() if k.startswith(GPU_DEPLOY_PREFIX) and v == PAUSED_FOR_MIG)


def live(flow: Flow, labels: Mapping[str, str]) -> bool:
    """The desired layout is in place: MIG Manager reports success for our config and GFD counts match."""
    return (
        labels.get(MIG_CONFIG) == flow.config
        and labels.get(MIG_CONFIG_STATE) == MigConfigState.SUCCESS
        and mig_counts(labels) == layouts_counts(flow.desired)
        and not paused_deploy_labels(labels)
    )


def next_step(
    flow: Flow, labels: Mapping[str, str], *, gpu_pods_left: int, now: float, timeout_s: float, propagation_s: float
) -> Step:
    """Decide the next step of a node's flow (module doc). Rebooting doubles the time allowed (a reboot
    adds a whole boot; plan 15 min without, 30 with: ``docs/gpu-facts.md``, MIG Manager reconfiguration flow).
    The label moves only once the config is visible to MIG Manager (``flow.visible_at``); a ``failed`` from a
    relabel within ``propagation_s`` of that moment (a fresh write a slow kubelet may not have delivered yet) is
    retried once."""
    elapsed = now - flow.since
    state = labels.get(MIG_CONFIG_STATE, "")
    if flow.phase == Phase.FAILED:
        return Step.WAIT
    if flow.phase == Phase.DRAINING:
        if gpu_pods_left == 0:
            return Step.RELABEL if now >= flow.visible_at else Step.WAIT
        return Step.FAIL if elapsed > timeout_s else Step.WAIT
    if live(flow, labels):
        return Step.SUCCEED
    if labels.get(MIG_CONFIG) == flow.config and state == MigConfigState.FAILED:
        fresh = flow.since - flow.visible_at <= propagation_s
        return Step.RETRY if fresh and flow.retries < MAX_RETRIES else Step.FAIL
    limit = timeout_s * 2 if state == MigConfigState.REBOOTING else timeout_s
    if elapsed <= limit:
        return Step.WAIT
    if state == MigConfigState.PENDING and flow.recoveries < MAX_RECOVERIES:
        return Step.RECOVER
    return Step.FAIL


def mig_status(flow: Flow | None, labels: Mapping[str, str], timeout_s: float) -> MigStatus:
    """The node's :class:`MigStatus`: our flow when there is one, else what the operator's label says."""
    state = labels.get(MIG_CONFIG_STATE, "")
    if flow is None:
        try:
            return MigStatus(state=MigConfigState(state)) if state else MigStatus()
        except ValueError:
            return MigStatus()
    if flow.phase == Phase.FAILED:
        return MigStatus(state=MigConfigState.FAILED, desired=flow.desired, since=flow.since)
    reported = MigConfigState.REBOOTING if state == MigConfigState.REBOOTING else MigConfigState.PENDING
    # The watchdog's deadline is the latest the change can finish before it is declared failed.
    return MigStatus(state=reported, desired=flow.desired, since=flow.since, ready_at=flow.since + timeout_s)
