"""The demo seed behind ``make demo``: an organisation, its users and an 80-GPU fleet, idempotently.

Everything goes through the same services production uses (the org file path of ``teams apply`` and the
inventory's ``node_register``), so the demo exercises real code and re-running it changes nothing. Users get
the password ``demo`` only when they are created: a password someone changed survives a re-seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from demo.billing import billing_demo_seed
from scheduler.autoscaled import AutoscaledPool, Autoscaler
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.model.vocabulary import CapacityTier, Fabric, Interconnect
from scheduler.models import Gpu, GpuModel, Node
from scheduler.services.fleet import gpu_models_sync, node_register
from teams.models import Team
from teams.orgfile import validate_org
from teams.services import org_apply

DEMO_PASSWORD = "demo"
ADMIN_USERNAME = "admin"
FINANCE_USERNAME = "finance"

# (slug, name, weight, quotas as (gpu_class, guaranteed, burst), projects as (code, name)).
# Guarantees are sized to fit on reserved capacity alone (40 GPUs: 24 A100 + 16 H100), so losing every spot
# node never breaks a promise: `any` 16+10+6 = 32 ≤ 40, A100 4+6+4 = 14 ≤ 24, H100 8+2 = 10 ≤ 16. Bursts
# overlap on purpose: they borrow idle capacity, and the fair share (weights 3:2:1) settles contention.
_TEAMS: tuple[tuple[str, str, int, tuple[tuple[str, int, int], ...], tuple[tuple[str, str], ...]], ...] = (
    (
        "nlp",
        "Language Models",
        3,
        (("any", 16, 40), ("A100", 4, 16), ("H100", 8, 24)),
        (("llm-pretrain", "LLM pretraining"), ("chat-serving", "Chat assistant serving"), ("eval", "Evaluation")),
    ),
    (
        "vision",
        "Computer Vision",
        2,
        (("any", 10, 28), ("A100", 6, 16), ("H100", 2, 8)),
        (("detect-train", "Detection training"), ("seg-serving", "Segmentation inference")),
    ),
    (
        "speech",
        "Speech & Audio",
        1,
        (("any", 6, 16), ("A100", 4, 12)),
        (("asr-train", "Speech recognition training"), ("tts-serving", "Text-to-speech serving")),
    ),
)

# The priority grants (teams.grants): production preempts other teams' work, so only the team that serves
# production traffic has it, and for inference only (the opening's chat-serving-70b, the feed's chat-serving).
# The other teams keep the default (high): a re-seed leaves whatever an admin granted them since.
_PRODUCTION_KINDS: dict[str, tuple[str, ...]] = {"nlp": ("inference",)}

# --- Prices, USD per GPU-hour: docs/gpu-facts.md, Prices: AWS us-east-1 (instance price ÷ 8). ---
# On-demand: the "On-demand now" column. A100-PCIE-40GB has no AWS instance of its own; p4d (8×A100 40GB
# SXM4) is the nearest listed A100 40GB, so the PCIe servers borrow its rate.
_ON_DEMAND_PRICE: dict[str, Decimal] = {
    "A100-SXM4-80GB": Decimal("3.43"),  # p4de.24xlarge $27.447/h
    "H100-SXM5-80GB": Decimal("6.88"),  # p5.48xlarge $55.04/h
    "A100-PCIE-40GB": Decimal("2.74"),  # p4d.24xlarge $21.958/h
}
# Spot: the "Spot now" column is a range by availability zone; we use its midpoint, since the demo does not
# pin an AZ's price and the low end would flatter spot.
_SPOT_PRICE: dict[str, Decimal] = {
    "A100-SXM4-80GB": (Decimal("1.08") + Decimal("1.25")) / 2,  # 1.165
    "H100-SXM5-80GB": (Decimal("2.20") + Decimal("3.22")) / 2,  # 2.71
    "A100-PCIE-40GB": (Decimal("0.31") + Decimal("1.02")) / 2,  # 0.665
}
# Reserved: §7.1 "Commitments ⚠" gives the planning assumption "1-yr ≈ 30–40% off the current on-demand
# rate" (per-family GPU commitment rates were not retrieved); we take the middle, 35% off.
_RESERVED_DISCOUNT = Decimal("0.35")


def price_per_gpu_hour(*, gpu_model: str, tier: str) -> Decimal:
    """The demo's list price for one GPU of ``gpu_model`` bought in ``tier``."""
    if tier == CapacityTier.SPOT:
        price = _SPOT_PRICE[gpu_model]
    elif tier == CapacityTier.RESERVED:
        price = _ON_DEMAND_PRICE[gpu_model] * (1 - _RESERVED_DISCOUNT)
    else:
        price = _ON_DEMAND_PRICE[gpu_model]
    return price.quantize(Decimal("0.0001"))


# --- Fleet: 8 × 8-GPU NVSwitch boxes and 4 × 4-GPU NVLink-pair servers = 80 GPUs, 8 of them in MIG. ---
_SHAPES: dict[str, tuple[str, int, str]] = {
    # node-name prefix → (catalog model, GPUs per node, interconnect)
    "a100-sxm80": ("A100-SXM4-80GB", 8, Interconnect.NVSWITCH),  # HGX A100 80GB, as p4de
    "h100-sxm80": ("H100-SXM5-80GB", 8, Interconnect.NVSWITCH),  # HGX H100, as p5
    "a100-pcie40": ("A100-PCIE-40GB", 4, Interconnect.NVLINK_PAIRS),  # 4 PCIe cards, two NVLink bridges
}
# What GPU Feature Discovery would report for each model (docs/gpu-facts.md, GPU Feature Discovery labels;
# product strings as GFD prints them).
_GFD: dict[str, dict[str, str]] = {
    "A100-SXM4-80GB": {"product": "NVIDIA-A100-SXM4-80GB", "family": "ampere", "major": "8", "minor": "0"},
    "H100-SXM5-80GB": {"product": "NVIDIA-H100-80GB-HBM3", "family": "hopper", "major": "9", "minor": "0"},
    "A100-PCIE-40GB": {"product": "NVIDIA-A100-PCIE-40GB", "family": "ampere", "major": "8", "minor": "0"},
}
# One spine over two leaves. The leaves sit in different AZs of one region, so a gang that spills past a
# leaf also crosses AZs: the scheduler's node → leaf → spine packing order already treats that as last resort.
_LEAF_ZONES = {"leaf-1": "us-east-1a", "leaf-2": "us-east-1b"}
_SPINE = "spine-1"
_REGION = "us-east-1"
# Our own topology label prefix: AWS's network-node-layer values are opaque IDs, and on-prem fleets carry custom
# leaf/spine labels (docs/gpu-facts.md, How Kubernetes exposes topology); these mirror Node.leaf_switch and Node.spine.
_TOPOLOGY_PREFIX = "network.microcosm.dev"

# MIG layouts, each accepted by scheduler.core.gpus.catalog.validate_layout (node_register re-checks them).
# all-balanced is the GPU Operator's 2 × 1g + 1 × 2g + 1 × 3g (docs/gpu-facts.md, GPU Operator default configs).
_BALANCED_80GB = [["1g.10gb", 0], ["1g.10gb", 1], ["2g.20gb", 2], ["3g.40gb", 4]]
_BALANCED_40GB = [["1g.5gb", 0], ["1g.5gb", 1], ["2g.10gb", 2], ["3g.20gb", 4]]
# A custom mig-parted config ("Custom configs" in docs/gpu-facts.md, GPU Operator default configs): all-balanced on GPUs
# 0-1, MIG off on the rest, so an on-demand box serves small inference on slices and still trains on six whole GPUs.
_PARTIAL_MIG_CONFIG = "balanced-gpu0-1"


# EFA interfaces per instance (docs/gpu-facts.md, Running a multi-node training job on Kubernetes: p5.48xlarge 32,
# p4d 4 — p4de assumed alike). The reserved SXM boxes sit in one cluster placement group with EFA, as a training
# pool is bought; on-demand and spot boxes come from wherever capacity is and talk TCP only.
_EFA_DEVICES = {"a100-sxm80": 4, "h100-sxm80": 32}
_PLACEMENT_GROUP = "pg-training-1"


@dataclass(frozen=True)
class _NodePlan:
    shape: str  # key of _SHAPES
    tier: CapacityTier
    number: int
    leaf: str
    mig_layouts: dict[int, list[list[Any]]] = field(default_factory=dict)
    mig_config: str = "all-disabled"  # the nvidia.com/mig.config value that would produce mig_layouts

    @property
    def efa_devices(self) -> int:
        """EFA interfaces of a reserved SXM box; 0 (TCP only) for every other node."""
        return _EFA_DEVICES.get(self.shape, 0) if self.tier == CapacityTier.RESERVED else 0

    @property
    def name(self) -> str:
        short = {CapacityTier.RESERVED: "res", CapacityTier.ON_DEMAND: "od", CapacityTier.SPOT: "spot"}[self.tier]
        return f"{self.shape}-{short}-{self.number:02d}"


_R, _OD, _SP = CapacityTier.RESERVED, CapacityTier.ON_DEMAND, CapacityTier.SPOT
# Reserved capacity (the guarantees) on leaf-1; elastic on-demand and spot capacity on leaf-2.
_FLEET: tuple[_NodePlan, ...] = (
    _NodePlan("a100-sxm80", _R, 1, "leaf-1"),
    _NodePlan("a100-sxm80", _R, 2, "leaf-1"),
    _NodePlan("h100-sxm80", _R, 1, "leaf-1"),
    _NodePlan("h100-sxm80", _R, 2, "leaf-1"),
    _NodePlan("a100-pcie40", _R, 1, "leaf-1"),
    _NodePlan("a100-pcie40", _R, 2, "leaf-1"),
    _NodePlan("a100-sxm80", _OD, 1, "leaf-2", {0: _BALANCED_80GB, 1: _BALANCED_80GB}, _PARTIAL_MIG_CONFIG),
    _NodePlan("h100-sxm80", _OD, 1, "leaf-2", {0: _BALANCED_80GB, 1: _BALANCED_80GB}, _PARTIAL_MIG_CONFIG),
    _NodePlan("a100-pcie40", _OD, 1, "leaf-2", {i: _BALANCED_40GB for i in range(4)}, "all-balanced"),
    _NodePlan("a100-sxm80", _SP, 1, "leaf-2"),
    _NodePlan("h100-sxm80", _SP, 1, "leaf-2"),
    _NodePlan("a100-pcie40", _SP, 1, "leaf-2"),
)


@dataclass(frozen=True)
class DemoLogin:
    username: str
    role: str  # "platform admin", "finance", "team lead" or "team member"
    team: str  # the team's name; "" for roles that span every team


@dataclass(frozen=True)
class DemoSeedResult:
    """Row counts after the seed (the whole database, not only demo rows) and the demo's sign-ins."""

    teams: int
    users: int
    nodes: int
    gpus: int
    mig_gpus: int
    logins: tuple[DemoLogin, ...]
    users_created: tuple[str, ...]  # empty on a re-seed
    history_entries: int = 0  # ledger entries the past month's work closed into; 0 when no history was made
    seconds: float = 0.0  # how long the seed took (make demo waits for it)


def demo_logins() -> tuple[DemoLogin, ...]:
    """Every demo account, in the order the banner lists them."""
    logins = [DemoLogin(ADMIN_USERNAME, "platform admin", ""), DemoLogin(FINANCE_USERNAME, "finance", "")]
    for slug, name, *_ in _TEAMS:
        logins += [DemoLogin(f"{slug}-lead", "team lead", name), DemoLogin(f"{slug}-member", "team member", name)]
    return tuple(logins)


def demo_org() -> dict[str, Any]:
    """The demo organisation in the org-file format of spec/org.md."""
    return {
        "teams": [
            {
                "name": name,
                "slug": slug,
                "namespace": f"team-{slug}",
                "weight": weight,
                "quotas": [{"gpu_class": c, "guaranteed": g, "burst": b} for c, g, b in quotas],
                "projects": [{"code": code, "name": project} for code, project in projects],
                "members": [
                    {"username": f"{slug}-lead", "role": "lead"},
                    {"username": f"{slug}-member", "role": "member"},
                ],
                **(
                    {"max_priority": "production", "production_kinds": list(_PRODUCTION_KINDS[slug])}
                    if slug in _PRODUCTION_KINDS
                    else {}
                ),
            }
            for slug, name, weight, quotas, projects in _TEAMS
        ],
        "finance": [FINANCE_USERNAME],
        "platform_admins": [ADMIN_USERNAME],
    }


def demo_seed(*, history: bool = True) -> DemoSeedResult:
    """Seed the demo organisation and fleet; safe to run any number of times.

    ``history``: also a month of past work in the ledger (demo.billing), what ``make demo`` shows finance; it
    takes most of the seed's time (tens of thousands of ledger entries), so tests of the org and fleet skip it.
    """
    started = time.monotonic()
    with transaction.atomic():
        created = _users_ensure([login.username for login in demo_logins()])
        # Users exist first, so org_apply finds them instead of creating them without a usable password.
        org_apply(spec=validate_org(demo_org()))
        gpu_models_sync()
        for plan in _FLEET:
            _node_seed(plan)
        _pool_seed()
    # Billing: the price catalog, reserved commitments and a closed ledger of past work.
    closed = billing_demo_seed(now=timezone.now(), history=history)
    return DemoSeedResult(
        teams=Team.objects.count(),
        users=get_user_model().objects.count(),
        nodes=Node.objects.count(),
        gpus=Gpu.objects.count(),
        mig_gpus=Gpu.objects.exclude(mig_layout=[]).count(),
        logins=demo_logins(),
        users_created=tuple(created),
        history_entries=closed.entries if closed is not None else 0,
        seconds=time.monotonic() - started,
    )


# One small autoscaled pool of the simulated cloud, so the demo shows on-demand capacity for peaks: two 8-GPU H100
# nodes at most, at the price catalog's on-demand price, arriving after the documented default.
DEMO_POOL = "h100-on-demand"


def _pool_seed() -> AutoscaledPool:
    """The demo's autoscaled pool, as the admin would keep it; a re-seed leaves an admin's changes to it alone."""
    pool, _ = AutoscaledPool.objects.get_or_create(
        name=DEMO_POOL,
        defaults={
            "autoscaler": Autoscaler.SIMULATED,
            "provisioning_class": "",
            "node_selector": {"microcosm.io/pool": DEMO_POOL},
            "gpu_model": GpuModel.objects.get(name="H100-SXM5-80GB"),
            "gpus_per_node": 8,
            "interconnect": Interconnect.NVSWITCH,
            "max_nodes": 2,
        },
    )
    return pool


def _users_ensure(usernames: list[str]) -> list[str]:
    """Create the missing users with the demo password; never touch an existing user's password."""
    user_model = get_user_model()
    existing = set(user_model.objects.filter(username__in=usernames).values_list("username", flat=True))
    created = [username for username in usernames if username not in existing]
    for username in created:
        user_model.objects.create_user(username=username, password=DEMO_PASSWORD)
    return created


def _node_seed(plan: _NodePlan) -> Node:
    model, gpu_count, interconnect = _SHAPES[plan.shape]
    return node_register(
        name=plan.name,
        gpu_model=model,
        gpu_count=gpu_count,
        interconnect=interconnect,
        leaf_switch=plan.leaf,
        spine=_SPINE,
        tier=plan.tier,
        price_per_gpu_hour=price_per_gpu_hour(gpu_model=model, tier=plan.tier),
        zone=_LEAF_ZONES[plan.leaf],
        labels=_node_labels(plan, model=model, gpu_count=gpu_count),
        mig_layouts=plan.mig_layouts,
        fabric=Fabric.EFA if plan.efa_devices else Fabric.TCP,
        fabric_devices=plan.efa_devices,
        placement_group=_PLACEMENT_GROUP if plan.efa_devices else "",
    )


def _node_labels(plan: _NodePlan, *, model: str, gpu_count: int) -> dict[str, str]:
    """The labels the kubelet, Karpenter and the GPU Operator would put on this node (``docs/gpu-facts.md``, GPU
    Feature Discovery labels, How Kubernetes exposes topology, Spot and preemption signals)."""
    gfd = _GFD[model]
    spec = GPU_MODEL_BY_NAME[model]
    labels = {
        "kubernetes.io/hostname": plan.name,
        "topology.kubernetes.io/region": _REGION,
        "topology.kubernetes.io/zone": _LEAF_ZONES[plan.leaf],
        f"{_TOPOLOGY_PREFIX}/spine": _SPINE,
        f"{_TOPOLOGY_PREFIX}/leaf": plan.leaf,
        # Karpenter's values are exactly our tier names: spot | on-demand | reserved.
        "karpenter.sh/capacity-type": str(plan.tier),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gfd["product"],
        "nvidia.com/gpu.count": str(gpu_count),
        "nvidia.com/gpu.memory": str(spec.memory_mib),
        "nvidia.com/gpu.family": gfd["family"],
        "nvidia.com/gpu.compute.major": gfd["major"],
        "nvidia.com/gpu.compute.minor": gfd["minor"],
        "nvidia.com/mig.capable": "true" if spec.mig_capable else "false",
        # mixed: MIG slices and whole GPUs share the fleet, each slice its own nvidia.com/mig-<profile>.
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": plan.mig_config,
        "nvidia.com/mig.config.state": "success",
    }
    # Mixed strategy: GFD publishes one count per MIG profile present on the node.
    counts: dict[str, int] = {}
    for layout in plan.mig_layouts.values():
        for profile, _start in layout:
            counts[profile] = counts.get(profile, 0) + 1
    for profile, count in sorted(counts.items()):
        labels[f"nvidia.com/mig-{profile}.count"] = str(count)
    return labels
