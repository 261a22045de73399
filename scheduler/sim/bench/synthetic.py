"""A seeded synthetic cluster and backlog for the scale benchmark (B5).

``synthetic_snapshot(shape)`` returns a :class:`~scheduler.core.model.snapshot.Snapshot` that looks like a busy
production cluster: about half of its GPUs run work, and a backlog of pending jobs of every kind waits.
Pure Python, no Django; every draw comes from one ``random.Random(shape.seed)`` in a fixed order, so the
same shape always gives the same snapshot (equal by ``==``) in any process.

Distributions (probabilities per draw):

Cluster
- Topology: ``nodes_per_leaf`` (32) nodes per leaf switch, ``leaves_per_spine`` (8) leaves per spine; names
  are zero-padded so that name order is build order.
- GPU model, one per leaf (a leaf is one scalable unit bought at once): A100-SXM4-80GB NVSwitch 0.45,
  H100-SXM5-80GB NVSwitch 0.35, A100-PCIE-40GB NVLink pairs 0.20.
- Capacity tier per node: reserved 0.5, on-demand 0.3, spot 0.2; list prices per GPU-hour from
  ``docs/gpu-facts.md``, Prices (AWS p4d/p4de/p5 on-demand before the 2025 cuts, ×0.6 for reserved, ×0.35 for
  spot).
- MIG: 0.15 of nodes have MIG on, with the GPU Operator's ``all-balanced`` layout (2×1g + 2g + 3g) on every
  GPU (half of those nodes) or on the first half of the GPUs only (the other half).
- Time-slicing: 0.10 of the nodes without MIG have ``sharing=True``.
- Cordoned: 0.01 of the nodes are not schedulable (their running work stays).

Teams: ``teams`` (20) teams; weight 2 for 0.2 of them, else 1. Overall guarantees split 70 % of the
cluster's GPUs in proportion to Gamma(2, 1) draws; 0.3 of the teams also guarantee H100 (half their overall
figure); 0.5 have a burst of 1.5–3× their guarantee, the rest no burst entry (unlimited).

Running work (about half of the GPUs, built by construction so every slot is valid and no slot is held
twice):
- Whole-GPU nodes: ``k`` busy GPUs, uniform in 0..G (mean G/2), filled from GPU 0 by training jobs of
  1/2/4/8 GPUs (weights 0.3/0.3/0.2/0.2, never more than what is left). A node drawn entirely busy starts,
  with probability 0.4, a multi-node gang of 2–4 whole-node replicas that takes the next MIG-off nodes of its
  leaf (cut short at the leaf's end).
- MIG GPUs: every instance is busy with probability 0.5, with an inference job asking that profile.
- Shared GPUs: busy with probability 0.6, holding 1–4 shares of 100/200/250/300/500 milli (sum ≤ 1000).
- Teams are drawn in proportion to their guarantee. A job is non-preemptible (probability 0.7) only when it
  fits in its team's guarantee (overall and, when listed, per class): admitted non-preemptible work never
  exceeds a guarantee, as fair share admits it. Started 1 minute to 3 days ago; checkpointed every 30 min.
- Priorities: production 0.05, high 0.15, normal 0.6, low 0.2 (production only for inference).

Pending backlog (``pending`` jobs, submitted up to 2 days ago, team rank 0–20, teams by Zipf activity 1/(i+1)):
- 0.40 whole-GPU training: 1/2/4/8 GPUs per replica (0.3/0.25/0.2/0.25); 4- and 8-GPU jobs are gangs of
  2–4 replicas with probability 0.25. Constraint: none 0.55, class H100 0.25, A100-SXM4-80GB 0.15, class
  A100 0.05. Tier: any 0.55, spot-ok 0.35 (always preemptible), reserved-only 0.10; otherwise preemptible
  0.4. Duration log-normal, median 4 h, σ 1.
- 0.30 inference: MIG profile 0.5 (80 GB family 1g.10gb/2g.20gb/3g.40gb 0.8, 40 GB family
  1g.5gb/2g.10gb/3g.20gb on A100-PCIE-40GB 0.2), memory_gib 0.4 (3–40 GiB), a model 0.1 (1–70 B params,
  bf16/int8/int4). Priority production 0.15, high 0.35, normal 0.4, low 0.1; tier reserved-only 0.2.
- 0.15 shares: gpu_milli 100/200/250/300/500/700, inference or batch, normal or low, preemptible 0.5.
- 0.14 batch: 1 GPU (0.7) or 2, low 0.6 / normal 0.4, preemptible 0.8, spot-ok 0.6.
- 0.01 impossible: a GPU the cluster does not have (class H200, or the H200 profile 1g.18gb) — the
  rejections a real queue also sees.
Preemptible flags never apply to production work.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, TypeVar

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import FULL_GPU_MILLI, UNITS_PER_GPU
from scheduler.core.model.cluster_state import gpu_class_of
from scheduler.core.model.snapshot import Job, MigLayout, ModelProfile, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import CapacityTier, Dtype, Interconnect, JobKind, JobTier, Priority
from scheduler.core.sizing.layouts import named_layout

T = TypeVar("T")
NOW = 1_000_000.0  # virtual seconds: the cycle's ``now``
DAY_S = 86_400.0
CHECKPOINT_S = 1_800.0

# (model, interconnect, on-demand $/GPU-hour: AWS p4de/p5/p4d before the 2025 cuts, docs/gpu-facts.md), weight
MODELS: tuple[tuple[tuple[str, Interconnect, float], float], ...] = (
    (("A100-SXM4-80GB", Interconnect.NVSWITCH, 5.12), 0.45),
    (("H100-SXM5-80GB", Interconnect.NVSWITCH, 12.29), 0.35),
    (("A100-PCIE-40GB", Interconnect.NVLINK_PAIRS, 4.10), 0.20),
)
TIERS: tuple[tuple[tuple[CapacityTier, float], float], ...] = (
    ((CapacityTier.RESERVED, 0.6), 0.5),
    ((CapacityTier.ON_DEMAND, 1.0), 0.3),
    ((CapacityTier.SPOT, 0.35), 0.2),
)
RUNNING_PRIORITY = ((Priority.PRODUCTION, 0.05), (Priority.HIGH, 0.15), (Priority.NORMAL, 0.6), (Priority.LOW, 0.2))
INFERENCE_PRIORITY = ((Priority.PRODUCTION, 0.15), (Priority.HIGH, 0.35), (Priority.NORMAL, 0.4), (Priority.LOW, 0.1))
TRAINING_PRIORITY = ((Priority.HIGH, 0.2), (Priority.NORMAL, 0.55), (Priority.LOW, 0.25))
SHARE_MILLI = (100, 200, 250, 300, 500)
PENDING_SHARE_MILLI = (100, 200, 250, 300, 500, 700)
MIG_80GB = ("1g.10gb", "2g.20gb", "3g.40gb")
MIG_40GB = ("1g.5gb", "2g.10gb", "3g.20gb")
MEMORY_GIB = (3.0, 5.0, 8.0, 10.0, 15.0, 18.0, 24.0, 30.0, 35.0, 40.0)
MODEL_PARAMS_B = (1.0, 3.0, 7.0, 8.0, 13.0, 34.0, 70.0)


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """The size and seed of a synthetic cluster; everything else follows from the module's distributions."""

    nodes: int
    pending: int
    gpus_per_node: int = 8
    seed: int = 42
    teams: int = 20
    nodes_per_leaf: int = 32
    leaves_per_spine: int = 8

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1 or self.pending < 0 or self.teams < 1:
            raise ValueError("a cluster needs at least one node, one GPU per node and one team; pending ≥ 0")


def synthetic_snapshot(shape: ClusterShape) -> Snapshot:
    """The snapshot of ``shape`` (module doc): deterministic for the shape, seed included."""
    rng = random.Random(shape.seed)
    nodes = _nodes(shape, rng)
    teams = _teams(shape, nodes, rng)
    running = _Running(shape, teams, rng).build(nodes)
    pending = _pending(shape, teams, rng)
    return Snapshot(nodes=tuple(nodes), teams=tuple(teams), running=tuple(running), pending=tuple(pending))


def _pick(rng: random.Random, table: Sequence[tuple[T, float]]) -> T:
    """One value of a (value, weight) table."""
    return rng.choices([value for value, _ in table], weights=[weight for _, weight in table])[0]


# -- cluster ---------------------------------------------------------------------------------------------


def _nodes(shape: ClusterShape, rng: random.Random) -> list[Node]:
    gpus = shape.gpus_per_node
    balanced_by_model = {model: named_layout(model, "all-balanced") for (model, _, _), _ in MODELS}
    nodes: list[Node] = []
    model = MODELS[0][0]
    for i in range(shape.nodes):
        leaf = i // shape.nodes_per_leaf
        if i % shape.nodes_per_leaf == 0:
            model = _pick(rng, MODELS)
        name, interconnect, price = model
        tier, price_factor = _pick(rng, TIERS)
        mig: tuple[MigLayout, ...] = ()
        sharing = False
        if rng.random() < 0.15:
            balanced = balanced_by_model[name]
            mig_gpus = gpus if rng.random() < 0.5 else max(1, gpus // 2)
            mig = tuple(balanced if g < mig_gpus else () for g in range(gpus))
        elif rng.random() < 0.10:
            sharing = True
        nodes.append(
            Node(
                name=f"n{i:05d}",
                gpu_model=name,
                gpu_count=gpus,
                interconnect=interconnect,
                leaf=f"leaf{leaf:04d}",
                spine=f"spine{leaf // shape.leaves_per_spine:03d}",
                tier=tier,
                price_per_gpu_hour=round(price * price_factor, 2),
                schedulable=rng.random() >= 0.01,
                mig=mig,
                sharing=sharing,
            )
        )
    return nodes


def _teams(shape: ClusterShape, nodes: Sequence[Node], rng: random.Random) -> list[Team]:
    total_gpus = sum(node.gpu_count for node in nodes)
    draws = [rng.gammavariate(2.0, 1.0) for _ in range(shape.teams)]
    scale = 0.7 * total_gpus / sum(draws)
    teams = []
    for t, draw in enumerate(draws):
        overall = round(draw * scale, 1)
        guaranteed = [("any", overall)]
        if rng.random() < 0.3:
            guaranteed.append(("H100", round(overall / 2, 1)))
        burst = (("any", round(overall * rng.uniform(1.5, 3.0), 1)),) if rng.random() < 0.5 else ()
        weight = 2.0 if rng.random() < 0.2 else 1.0
        teams.append(Team(name=f"team{t:02d}", weight=weight, guaranteed=tuple(sorted(guaranteed)), burst=burst))
    return teams


# -- running work ----------------------------------------------------------------------------------------


class _Running:
    """Builds the running jobs node by node, keeping each team's usage to decide who may be non-preemptible."""

    def __init__(self, shape: ClusterShape, teams: Sequence[Team], rng: random.Random) -> None:
        self.shape = shape
        self.rng = rng
        self.teams = list(teams)
        self.team_weights = [max(team.guaranteed_for("any") or 0.0, 0.1) for team in teams]
        self.used: dict[tuple[str, str], int] = {}  # (team, class or "any") → units
        self.out: list[Running] = []
        self.gang: list[tuple[Slot, ...]] = []  # replicas of a multi-node gang being collected
        self.gang_node: Node | None = None
        self.gang_size = 0

    def build(self, nodes: Sequence[Node]) -> list[Running]:
        for node in nodes:
            if self.gang_node is not None and self.gang_node.leaf != node.leaf:
                self._flush_gang()
            if node.sharing:
                self._shared(node)
            for gpu in range(node.gpu_count):
                for profile, start in node.layout(gpu):
                    if self.rng.random() < 0.5:
                        slot = Slot(node.name, gpu, mig_profile=profile, mig_start=start)
                        self._add(node, Request(mig_profile=profile), JobKind.INFERENCE, ((slot,),))
            if not node.sharing:
                self._whole(node)
        self._flush_gang()
        return self.out

    def _whole(self, node: Node) -> None:
        free = [g for g in range(node.gpu_count) if not node.layout(g)]
        if self.gang and len(free) == node.gpu_count:
            self._join_gang(node, free)  # a gang under way takes the next whole nodes of its leaf
            return
        busy = self.rng.randint(0, len(free))
        if busy == node.gpu_count and self.rng.random() < 0.4:
            self.gang_size = self.rng.randint(2, 4)
            self._join_gang(node, free)
            return
        at = 0
        while at < busy:
            size = _pick(self.rng, [(s, w) for s, w in ((1, 0.3), (2, 0.3), (4, 0.2), (8, 0.2)) if s <= busy - at])
            slots = tuple(Slot(node.name, g) for g in free[at : at + size])
            self._add(node, Request(gpus=size), JobKind.TRAINING, (slots,))
            at += size

    def _join_gang(self, node: Node, free: list[int]) -> None:
        self.gang.append(tuple(Slot(node.name, g) for g in free))
        self.gang_node = node
        if len(self.gang) == self.gang_size:
            self._flush_gang()

    def _shared(self, node: Node) -> None:
        for gpu in range(node.gpu_count):
            if self.rng.random() >= 0.6:
                continue
            used = 0
            for _ in range(4):
                milli = self.rng.choice(SHARE_MILLI)
                if used + milli > FULL_GPU_MILLI:
                    break
                used += milli
                kind = JobKind.INFERENCE if self.rng.random() < 0.5 else JobKind.BATCH
                self._add(node, Request(gpu_milli=milli), kind, ((Slot(node.name, gpu, milli=milli),),))
                if self.rng.random() >= 0.7:
                    break

    def _flush_gang(self) -> None:
        if self.gang and self.gang_node is not None:
            per_replica = len(self.gang[0])
            self._add(self.gang_node, Request(gpus=per_replica), JobKind.TRAINING, tuple(self.gang))
        self.gang = []
        self.gang_node = None

    def _add(self, node: Node, request: Request, kind: JobKind, slots: tuple[tuple[Slot, ...], ...]) -> None:
        rng = self.rng
        team = rng.choices(self.teams, weights=self.team_weights)[0]
        priority = _pick(rng, RUNNING_PRIORITY)
        if priority == Priority.PRODUCTION and kind != JobKind.INFERENCE:
            priority = Priority.HIGH
        units = _units(node, request) * len(slots)
        gpu_class = gpu_class_of(node.gpu_model)
        fits = self._fits(team, gpu_class, units)
        preemptible = priority != Priority.PRODUCTION and (not fits or rng.random() < 0.3)
        if not preemptible:
            for key in ("any", gpu_class):
                self.used[(team.name, key)] = self.used.get((team.name, key), 0) + units
        started_at = NOW - rng.uniform(60.0, 3 * DAY_S)
        checkpoint = None
        if kind == JobKind.TRAINING:
            checkpoint = started_at + math.floor((NOW - started_at) / CHECKPOINT_S) * CHECKPOINT_S
        job = Job(
            id=f"r{len(self.out):07d}",
            team=team.name,
            request=request,
            kind=kind,
            priority=priority,
            replicas=len(slots),
            gpu_model=None,
            preemptible=preemptible,
            checkpoint_interval_s=CHECKPOINT_S if kind == JobKind.TRAINING else None,
            submitted_at=started_at - rng.uniform(0.0, 3_600.0),
        )
        self.out.append(Running(job=job, slots=slots, started_at=started_at, last_checkpoint_at=checkpoint))

    def _fits(self, team: Team, gpu_class: str, units: int) -> bool:
        """Would ``units`` more non-preemptible work stay within the team's guarantee (overall and class)?"""
        for key in ("any", gpu_class):
            limit = team.guaranteed_for(key)
            if limit is not None and self.used.get((team.name, key), 0) + units > round(limit * UNITS_PER_GPU):
                return False
        return True


def _units(node: Node, request: Request) -> int:
    """Units (1/7000 GPU) one replica of ``request`` holds on ``node``."""
    if request.mig_profile is not None:
        spec = GPU_MODEL_BY_NAME[node.gpu_model]
        return spec.profiles()[request.mig_profile].compute_slices * FULL_GPU_MILLI
    if request.gpu_milli is not None:
        return request.gpu_milli * (UNITS_PER_GPU // FULL_GPU_MILLI)
    return (request.gpus or 0) * UNITS_PER_GPU


# -- pending backlog -------------------------------------------------------------------------------------


class _JobFields(TypedDict, total=False):
    """The :class:`Job` fields a pending job's category draws (the rest are drawn per job)."""

    request: Request
    kind: JobKind
    priority: Priority
    replicas: int
    gpu_model: str | None
    tier: JobTier
    preemptible: bool
    checkpoint_interval_s: float | None
    duration_s: float | None


def _pending(shape: ClusterShape, teams: Sequence[Team], rng: random.Random) -> list[Job]:
    activity = [1.0 / (i + 1) for i in range(len(teams))]
    jobs = []
    for n in range(shape.pending):
        team = rng.choices(teams, weights=activity)[0].name
        category = rng.random()
        if category < 0.40:
            fields = _training(rng)
        elif category < 0.70:
            fields = _inference(rng)
        elif category < 0.85:
            fields = _share(rng)
        elif category < 0.99:
            fields = _batch(rng)
        else:
            fields = _impossible(rng)
        if fields.get("priority") == Priority.PRODUCTION:
            fields["preemptible"] = False
        jobs.append(
            Job(
                id=f"p{n:07d}",
                team=team,
                rank=rng.randint(0, 20),
                submitted_at=NOW - rng.uniform(0.0, 2 * DAY_S),
                **fields,
            )
        )
    return jobs


def _training(rng: random.Random) -> _JobFields:
    gpus = _pick(rng, ((1, 0.3), (2, 0.25), (4, 0.2), (8, 0.25)))
    replicas = rng.randint(2, 4) if gpus >= 4 and rng.random() < 0.25 else 1
    tier = _pick(rng, ((JobTier.ANY, 0.55), (JobTier.SPOT_OK, 0.35), (JobTier.RESERVED_ONLY, 0.10)))
    preemptible = tier == JobTier.SPOT_OK or rng.random() < 0.4
    return {
        "request": Request(gpus=gpus),
        "kind": JobKind.TRAINING,
        "priority": _pick(rng, TRAINING_PRIORITY),
        "replicas": replicas,
        "gpu_model": _pick(rng, ((None, 0.55), ("H100", 0.25), ("A100-SXM4-80GB", 0.15), ("A100", 0.05))),
        "tier": tier,
        "preemptible": preemptible,
        "checkpoint_interval_s": CHECKPOINT_S if preemptible else None,
        "duration_s": round(min(rng.lognormvariate(math.log(4 * 3_600.0), 1.0), 30 * DAY_S), 1),
    }


def _inference(rng: random.Random) -> _JobFields:
    way = rng.random()
    gpu_model = None
    if way < 0.5:
        if rng.random() < 0.8:
            request = Request(mig_profile=rng.choice(MIG_80GB))
        else:
            request, gpu_model = Request(mig_profile=rng.choice(MIG_40GB)), "A100-PCIE-40GB"
    elif way < 0.9:
        request = Request(memory_gib=rng.choice(MEMORY_GIB))
    else:
        dtype = rng.choice((Dtype.BF16, Dtype.INT8, Dtype.INT4))
        request = Request(model=ModelProfile(params_b=rng.choice(MODEL_PARAMS_B), dtype=dtype))
    return {
        "request": request,
        "kind": JobKind.INFERENCE,
        "priority": _pick(rng, INFERENCE_PRIORITY),
        "gpu_model": gpu_model,
        "tier": JobTier.RESERVED_ONLY if rng.random() < 0.2 else JobTier.ANY,
        "preemptible": rng.random() < 0.3,
    }


def _share(rng: random.Random) -> _JobFields:
    return {
        "request": Request(gpu_milli=rng.choice(PENDING_SHARE_MILLI)),
        "kind": JobKind.INFERENCE if rng.random() < 0.5 else JobKind.BATCH,
        "priority": Priority.NORMAL if rng.random() < 0.5 else Priority.LOW,
        "preemptible": rng.random() < 0.5,
    }


def _batch(rng: random.Random) -> _JobFields:
    preemptible = rng.random() < 0.8
    return {
        "request": Request(gpus=1 if rng.random() < 0.7 else 2),
        "kind": JobKind.BATCH,
        "priority": Priority.LOW if rng.random() < 0.6 else Priority.NORMAL,
        "tier": JobTier.SPOT_OK if rng.random() < 0.6 else JobTier.ANY,
        "preemptible": preemptible,
        "duration_s": round(rng.uniform(600.0, 6 * 3_600.0), 1),
    }


def _impossible(rng: random.Random) -> _JobFields:
    if rng.random() < 0.5:
        return {"request": Request(gpus=1), "kind": JobKind.TRAINING, "gpu_model": "H200"}
    return {"request": Request(mig_profile="1g.18gb"), "kind": JobKind.INFERENCE}
