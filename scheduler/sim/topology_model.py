"""How fast a data-parallel training job runs on its placement (B3, spec/benchmarks.md "topology").

Model (the spec's): one step = compute time + all-reduce time, no overlap of the two.

- compute = 6 · N · T / (peak · MFU) per GPU: N parameters, T tokens per GPU per step, 6 FLOPs per parameter
  per token for forward + backward (Kaplan et al. 2020), at a model FLOPs utilisation ``MFU``.
- all-reduce (ring) = 2 (n − 1) / n × gradient bytes / B, where n is the number of GPUs and B the one-way
  bandwidth per GPU of the **slowest link the job's GPUs span**; gradient bytes = 2 · N (16-bit gradients).
- speed of a placement = step time on the job's ideal placement / step time on its actual one (≤ 1), so a
  job's ``duration_s`` stays "work at full speed on an ideal placement" (spec/scenario.md). The ideal
  placement of n GPUs on nodes like the job's own: inside one node when n fits one (NVSwitch; on NVLink-pair
  servers the pair when n ≤ 2, else PCIe), otherwise whole nodes under one leaf switch. A single GPU, or a
  job that is not training, always runs at speed 1.
- a gang that spans GPU models (the engine's gangs across the models of one class; the baselines' anywhere)
  runs each step at the pace of its slowest GPU and over its slowest link: the actual step takes the slowest
  GPU's compute and the slowest link's all-reduce, and the ideal is the best that any one of its models offers
  (that model's GPU, its ideal placement on nodes like the job's own of that model).
  Its fast GPUs wait for the slow ones, and that is charged: measured against the slow model alone, a gang
  that put half its replicas on NVSwitch servers and half on PCIe servers would run "at full speed". For a
  gang on one model this is the rule above, unchanged.

N cancels out of the speed ratio (compute and gradients both scale with it); what matters is T, the GPU's
effective FLOP rate and the link bandwidths.

Link bandwidths, one direction, per GPU (``docs/gpu-facts.md``, Interconnect figures, unless marked):

- NVSwitch inside a node: A100 300 GB/s (NVLink3 600 GB/s bidirectional ÷ 2, marked ⚠ there); H100/H200
  380 GB/s (measured one-way p2p, NVIDIA/nccl#1264; nominal 900 bidirectional).
- NVLink bridge pair (PCIe cards): 300 GB/s ("≈600 GB/s per pair", marked ⚠ there, ÷ 2).
- PCIe inside a node, across pairs: 32 GB/s (Gen4 x16, A100) / 64 GB/s (Gen5 x16, H100) per direction.
- network under one leaf, NVSwitch servers: rail-optimised, one NIC per GPU: HDR 200 Gb/s = 25 GB/s (DGX
  A100), NDR 400 Gb/s = 50 GB/s (DGX H100).
- network, PCIe servers: 12.5 GB/s per GPU — an **assumption** (not in ``docs/gpu-facts.md``): one HDR
  200 Gb/s NIC per pair.
- across the spine: the leaf figure ÷ the fabric's ``oversubscription`` (NVIDIA's reference
  architecture is non-blocking, 1).
- those network figures are a node's **fabric** (InfiniBand, EFA, GPUDirect: the node's ``fabric``). Nodes
  without one (``fabric`` ``tcp``), or a placement whose nodes offer different fabrics (they cannot talk
  over either), all-reduce over TCP on the primary interface: 4 GB/s for the whole link, whatever the leaf
  (``docs/gpu-facts.md``, Running a multi-node training job on Kubernetes: "about 4 GB/s against about 340 GB/s
  with TCPXO on a3-megagpu-8g", read in NVIDIA's AI Cluster Runtime docs, not marked ⚠; the fabric figures
  above come from the DGX rows of Interconnect figures, which are marked ⚠). The ideal placement always has
  the fabric figure: a job's ``duration_s`` is its work on a well-connected placement, so a multi-node job on
  TCP shows as slow, not as ideal. The simulator's fleets state their fabric
  (:mod:`scheduler.sim.workload.clusters`: InfiniBand, what the figures above always assumed; a scenario
  node's ``fabric`` key), and a node that states none has none.

Peak dense BF16 FLOP rates are **not** in ``docs/gpu-facts.md``: A100 312 TFLOP/s and H100 SXM 989 TFLOP/s
are NVIDIA's datasheet figures (⚠ external); with MFU 0.4 and T = 16,384 tokens (batch 8 × 2,048 context)
they make communication about 2 % of an A100 step inside an NVSwitch node and ≈ 20 % across a leaf. GPUs are
rated per class, not per model: ``docs/gpu-facts.md`` lists no speed, FLOP rate or memory bandwidth per model
(only SMs per MIG profile, per class), so the models of one class — all a gang of the engine may mix — rate
alike, and such a gang pays its slowest link only; the slowest-GPU rule bites across classes.

Nodes without a ``leaf`` label are treated as far apart (across the spine), as the engine does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.model.snapshot import Job, Node, Slots
from scheduler.core.model.vocabulary import Fabric as NodeFabric
from scheduler.core.model.vocabulary import Interconnect, JobKind

Speed = Callable[[Job, Slots, Mapping[str, Node]], float]
"""The replay's hook: a running job's progress rate (work seconds per second) on its slots."""

GB = 1e9
NVSWITCH_GBPS = {"A100": 300.0, "H100": 380.0, "H200": 380.0}
NVLINK_PAIR_GBPS = 300.0
PCIE_GBPS = {"A100": 32.0, "H100": 64.0, "H200": 64.0}
NIC_PER_GPU_GBPS = {"A100": 25.0, "H100": 50.0, "H200": 50.0}
PCIE_SERVER_NIC_PER_GPU_GBPS = 12.5  # assumption: one HDR 200 Gb/s NIC per NVLink pair
TCP_GBPS = 4.0  # NCCL over TCP on the primary interface, nodes without a (common) fabric
PEAK_BF16_TFLOPS = {"A100": 312.0, "H100": 989.0, "H200": 989.0}  # datasheets, not in docs/gpu-facts.md
DEFAULT_CLASS = "A100"  # GPUs outside the catalog are costed as A100s


@dataclass(frozen=True, slots=True)
class StepProfile:
    """What one data-parallel step of a job costs; the defaults are the benchmarks' (module docstring)."""

    params_b: float = 1.0
    tokens_per_gpu_step: int = 16_384
    mfu: float = 0.4
    gradient_bytes_per_param: float = 2.0

    def __post_init__(self) -> None:
        if self.params_b <= 0 or self.tokens_per_gpu_step <= 0 or not 0 < self.mfu <= 1:
            raise ValueError("params_b and tokens_per_gpu_step must be positive and mfu in (0, 1]")


@dataclass(frozen=True, slots=True)
class Fabric:
    """The network above the nodes: ``oversubscription`` divides the bandwidth of paths across the spine."""

    oversubscription: float = 1.0

    def __post_init__(self) -> None:
        if self.oversubscription < 1:
            raise ValueError(f"oversubscription is a ratio ≥ 1 (1 = non-blocking), got {self.oversubscription!r}")


def gpu_class(node: Node) -> str:
    spec = GPU_MODEL_BY_NAME.get(node.gpu_model)
    return spec.gpu_class if spec is not None and spec.gpu_class in NVSWITCH_GBPS else DEFAULT_CLASS


def compute_s(profile: StepProfile, cls: str) -> float:
    """Seconds of compute per step on one GPU of class ``cls``."""
    flops = 6 * profile.params_b * 1e9 * profile.tokens_per_gpu_step
    return flops / (PEAK_BF16_TFLOPS[cls] * 1e12 * profile.mfu)


def allreduce_s(profile: StepProfile, gpus: int, bandwidth_gbps: float) -> float:
    """Ring all-reduce of the gradients over ``gpus`` GPUs whose slowest link carries ``bandwidth_gbps``."""
    if gpus <= 1:
        return 0.0
    gradient_bytes = profile.params_b * 1e9 * profile.gradient_bytes_per_param
    return 2 * (gpus - 1) / gpus * gradient_bytes / (bandwidth_gbps * GB)


def intra_node_gbps(node: Node, gpus: tuple[int, ...]) -> float:
    """Slowest link among ``gpus`` of one node: NVSwitch, an NVLink pair, or PCIe."""
    cls = gpu_class(node)
    if len(set(gpus)) <= 1:
        return math.inf
    if node.interconnect == Interconnect.NVSWITCH:
        return NVSWITCH_GBPS[cls]
    if node.interconnect == Interconnect.NVLINK_PAIRS and len({g // 2 for g in gpus}) == 1:
        return NVLINK_PAIR_GBPS
    return PCIE_GBPS[cls]


def nic_gbps(node: Node) -> float:
    """Per-GPU network bandwidth of the node's NICs to its leaf switch."""
    if node.interconnect == Interconnect.NVSWITCH:
        return NIC_PER_GPU_GBPS[gpu_class(node)]
    return PCIE_SERVER_NIC_PER_GPU_GBPS


def slowest_link_gbps(placement: Mapping[str, tuple[int, ...]], nodes: Mapping[str, Node], fabric: Fabric) -> float:
    """The one-way per-GPU bandwidth of the slowest link a placement (node → its GPU indexes) spans."""
    slowest = min(intra_node_gbps(nodes[name], gpus) for name, gpus in placement.items())
    if len(placement) > 1:
        used = [nodes[name] for name in placement]
        network = min(nic_gbps(node) for node in used)
        leaves = {node.leaf or f"<unlabelled {node.name}>" for node in used}
        if len(leaves) > 1:
            network /= fabric.oversubscription
        if not on_one_fabric(used):
            network = min(network, TCP_GBPS)
        slowest = min(slowest, network)
    return slowest


def on_one_fabric(used: Sequence[Node]) -> bool:
    """Do these nodes share a real fabric (not TCP, the same one on every node)?"""
    fabrics = {node.fabric for node in used}
    return len(fabrics) == 1 and NodeFabric.TCP not in fabrics


def ideal_link_gbps(gpus: int, node: Node) -> float:
    """The slowest link of the best placement of ``gpus`` GPUs on nodes shaped like ``node``."""
    if gpus <= 1:
        return math.inf
    if gpus <= node.gpu_count:
        return intra_node_gbps(node, tuple(range(gpus)))
    return min(intra_node_gbps(node, tuple(range(node.gpu_count))), nic_gbps(node))


def step_s(profile: StepProfile, gpus: int, cls: str, bandwidth_gbps: float) -> float:
    return compute_s(profile, cls) + allreduce_s(profile, gpus, bandwidth_gbps)


def ideal_step_s(profile: StepProfile, gpus: int, alike: Sequence[Node]) -> float:
    """Step time of ``gpus`` GPUs on their ideal placement on nodes like ``alike`` (nodes of one GPU model):
    that model's compute and the ideal link on the least connected of them (least NIC bandwidth, then fewest GPUs)."""
    node = min(alike, key=lambda n: (nic_gbps(n), n.gpu_count, n.name))
    return step_s(profile, gpus, gpu_class(node), ideal_link_gbps(gpus, node))


def placement_speed(
    slots: Slots, nodes: Mapping[str, Node], fabric: Fabric = Fabric(), profile: StepProfile = StepProfile()
) -> float:
    """Speed (≤ 1) of a data-parallel job on ``slots`` relative to its ideal placement (module docstring).

    Only whole-GPU slots take part in the all-reduce. The slowest GPU sets the compute time and the slowest
    link the all-reduce; the ideal is the best one GPU model of the placement offers.
    """
    placement: dict[str, set[int]] = {}
    for replica in slots:
        for slot in replica:
            placement.setdefault(slot.node, set()).add(slot.gpu)
    gpus = sum(len(indexes) for indexes in placement.values())
    if gpus <= 1:
        return 1.0
    by_node = {name: tuple(sorted(indexes)) for name, indexes in placement.items()}
    by_model: dict[str, list[Node]] = {}
    for name in by_node:
        by_model.setdefault(nodes[name].gpu_model, []).append(nodes[name])
    slowest_gpu = min((gpu_class(alike[0]) for alike in by_model.values()), key=lambda c: PEAK_BF16_TFLOPS[c])
    actual = step_s(profile, gpus, slowest_gpu, slowest_link_gbps(by_node, nodes, fabric))
    ideal = min(ideal_step_s(profile, gpus, alike) for alike in by_model.values())
    return min(1.0, ideal / actual)


def topology_speed(fabric: Fabric = Fabric(), profile: StepProfile = StepProfile()) -> Speed:
    """The replay hook: training jobs progress at :func:`placement_speed`, everything else at 1."""

    def speed(job: Job, slots: Slots, nodes: Mapping[str, Node]) -> float:
        if job.kind != JobKind.TRAINING:
            return 1.0
        return placement_speed(slots, nodes, fabric, profile)

    return speed
