"""The cluster view's data: every node and GPU, its MIG instances as segments of the GPU's 8 memory slices,
who holds each (by team), tiers, and free capacity per GPU class and tier.

Reads the inventory (``Node``, ``Gpu.mig_layout``) and the live allocations. Team names are shown for every
holder — the fleet is shared and seeing who uses it is the point — but a job's name and link only for teams
the reader may see (``visible_team_ids``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from billing.selectors import price_shown
from billing.services import price_book_load
from jobs.models import Allocation
from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME, MEMORY_SLICES, GpuModelSpec
from scheduler.core.model.vocabulary import NodeState
from scheduler.fabric_labels import fabric_label
from scheduler.models import Node

# Colour-blind-safe palette (Okabe–Ito and Tol), assigned to teams in slug order.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#882255", "#44AA99", "#999933")


@dataclass(frozen=True)
class Holder:
    team_slug: str
    colour: str
    job_id: int | None  # None: the reader may not see this team's jobs
    job_name: str


@dataclass(frozen=True)
class Segment:
    start: int  # first memory slice (0-based), the grid column is start + 1
    width: int  # memory slices
    label: str  # "3g.40gb" or "whole GPU" or "not partitioned"
    compute_slices: int
    holder: Holder | None
    partitioned: bool = True  # False: memory slices no MIG instance covers

    @property
    def column(self) -> str:
        return f"{self.start + 1} / span {self.width}"


@dataclass(frozen=True)
class GpuCell:
    index: int
    mig: bool
    segments: list[Segment]


@dataclass(frozen=True)
class NodeRow:
    name: str
    gpu_model: str
    gpu_class: str
    tier: str
    state: str
    price_per_gpu_hour: float  # what the ledger bills (billing.selectors.price_shown), not the node row's own
    gpus: list[GpuCell]
    free_gpus: float  # GPU-equivalents nobody holds (0 when the node does not take work)
    fabric: str = "TCP only"  # the network a gang spanning this node talks over: "EFA × 32", "TCP only"
    placement_group: str = ""
    price_is_fallback: bool = False  # no catalog price for its GPU model and tier: the node's own price is billed


@dataclass(frozen=True)
class FreeCapacity:
    gpu_class: str
    tier: str
    total_gpus: float
    free_gpus: float


@dataclass
class ClusterMap:
    nodes: list[NodeRow] = field(default_factory=list)
    teams: list[tuple[str, str]] = field(default_factory=list)  # (slug, colour) for the legend
    free: list[FreeCapacity] = field(default_factory=list)

    @property
    def total_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    @property
    def free_gpus(self) -> float:
        return round(sum(f.free_gpus for f in self.free), 2)


def cluster_map(*, visible_team_ids: set[int] | None) -> ClusterMap:
    """The fleet as drawn by the cluster view; ``visible_team_ids`` None means every team (platform admin)."""
    nodes = list(Node.objects.select_related("gpu_model").prefetch_related("gpus").order_by("tier", "name"))
    allocations = Allocation.objects.filter(ended_at__isnull=True).values_list(
        "node_id", "gpu_index", "mig_start", "job_id", "job__name", "job__team_id", "job__team__slug"
    )
    held: dict[tuple[int, int, int | None], tuple[int, str, int, str]] = {}
    slugs: set[str] = set()
    for node_id, gpu_index, mig_start, job_id, job_name, team_id, team_slug in allocations:
        held[(node_id, gpu_index, mig_start)] = (job_id, job_name, team_id, team_slug)
        slugs.add(team_slug)
    colours = {slug: PALETTE[i % len(PALETTE)] for i, slug in enumerate(sorted(slugs))}

    def holder(key: tuple[int, int, int | None]) -> Holder | None:
        if key not in held:
            return None
        job_id, job_name, team_id, team_slug = held[key]
        visible = visible_team_ids is None or team_id in visible_team_ids
        return Holder(team_slug, colours[team_slug], job_id if visible else None, job_name if visible else "")

    result = ClusterMap(teams=sorted(colours.items()))
    prices = price_book_load()
    now = timezone.now()
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for node in nodes:
        spec = GPU_MODEL_BY_NAME.get(node.gpu_model.name)
        layouts = {gpu.index: gpu.mig_layout or [] for gpu in node.gpus.all()}
        open_for_work = node.state == NodeState.READY
        cells = []
        free = 0.0
        for index in range(node.gpu_count):
            layout = layouts.get(index, [])
            segments, gpu_free = _segments(node.pk, index, layout, spec, holder)
            cells.append(GpuCell(index=index, mig=bool(layout), segments=segments))
            free += gpu_free if open_for_work else 0.0
        key = (node.gpu_model.gpu_class, node.tier)
        shown = price_shown(
            gpu_model=node.gpu_model.name, tier=node.tier, node_price=node.price_per_gpu_hour, at=now, prices=prices
        )
        totals[key][0] += node.gpu_count
        totals[key][1] += free
        result.nodes.append(
            NodeRow(
                name=node.name,
                gpu_model=node.gpu_model.name,
                gpu_class=node.gpu_model.gpu_class,
                tier=node.tier,
                state=node.state,
                price_per_gpu_hour=float(shown.price_per_gpu_hour),
                price_is_fallback=shown.fallback,
                gpus=cells,
                free_gpus=round(free, 2),
                fabric=fabric_label(node.fabric, node.fabric_devices),
                placement_group=node.placement_group,
            )
        )
    result.free = [
        FreeCapacity(gpu_class=c, tier=t, total_gpus=v[0], free_gpus=round(v[1], 2))
        for (c, t), v in sorted(totals.items())
    ]
    return result


def _segments(
    node_id: int,
    index: int,
    layout: list[list[Any]],
    spec: GpuModelSpec | None,
    holder: Callable[[tuple[int, int, int | None]], Holder | None],
) -> tuple[list[Segment], float]:
    """The GPU's segments (MIG instances, gaps no instance covers) and its free GPU-equivalents."""
    if not layout:
        who = holder((node_id, index, None))
        return [Segment(0, MEMORY_SLICES, "whole GPU", COMPUTE_SLICES, who)], (0.0 if who else 1.0)
    profiles = spec.profiles() if spec else {}
    segments = []
    covered = [False] * MEMORY_SLICES
    free = 0.0
    for profile, start in sorted(layout, key=lambda pair: pair[1]):
        row = profiles.get(profile)
        width = row.memory_slices if row else 1
        compute = row.compute_slices if row else 0
        for s in range(start, min(MEMORY_SLICES, start + width)):
            covered[s] = True
        who = holder((node_id, index, start))
        if who is None:
            free += compute / COMPUTE_SLICES
        segments.append(Segment(start, width, profile, compute, who))
    gap_start = None
    for s in range(MEMORY_SLICES + 1):
        if s < MEMORY_SLICES and not covered[s]:
            gap_start = s if gap_start is None else gap_start
        elif gap_start is not None:
            segments.append(Segment(gap_start, s - gap_start, "not partitioned", 0, None, partitioned=False))
            gap_start = None
    segments.sort(key=lambda seg: seg.start)
    return segments, free
