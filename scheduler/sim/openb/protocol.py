"""B1: the FGD artifact's openb replay (``../shared/traces/fgd-atc23-expected-results/PROTOCOL.md``).

Steps: GPU nodes only, node order permuted by the seed; pods sorted by name, shuffled by the seed, inflated by
resampling with replacement to 1.3× GPU capacity (stopping when the next draw's *per-GPU share* would
overshoot — the artifact's quirk) or trimmed by removing random pods until at or below it; each pod tried
once in order and never leaving; failures dropped; after every pod the allocation ratio is recorded against
the arrived workload (cumulative GPU request of pods tried, failed included, as % of capacity), bucketed to
whole percent (0–130) and averaged per bucket.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduler.sim.openb.cluster import bind, fresh_cluster, gpu_choices
from scheduler.sim.openb.fragmentation import Fragmentation, typical_shapes
from scheduler.sim.openb.policies import Candidate, Policy, bestfit_policy, fgd_policy, random_policy
from scheduler.sim.traces import TraceNode, TracePod

TUNE = 1.3


@dataclass(frozen=True, slots=True)
class B1Run:
    """One run: ``curve`` holds (arrived %, allocation %) per bucket, ascending; ``failed`` pods dropped."""

    policy: str
    seed: int
    pods_tried: int
    failed: int
    curve: tuple[tuple[int, float], ...]

    def unallocated_pct_at(self, arrived_pct: int = 100) -> float | None:
        """100 − allocation % in the bucket ``arrived_pct`` (None when no measurement fell in it)."""
        for pct, allocation in self.curve:
            if pct == arrived_pct:
                return 100.0 - allocation
        return None


def workload(pods: tuple[TracePod, ...], capacity_milli: int, rng: random.Random) -> list[TracePod]:
    """The pod sequence of one run: sorted by name, shuffled, then inflated or trimmed to TUNE × capacity."""
    original = sorted(pods, key=lambda pod: pod.name)
    order = list(original)
    rng.shuffle(order)
    target = TUNE * capacity_milli
    total = sum(pod.gpu_request_milli for pod in order)
    if total < target:
        while True:
            pod = rng.choice(original)
            if total + pod.gpu_milli > target:
                break
            order.append(pod)
            total += pod.gpu_request_milli
    while total > target:
        pod = order.pop(rng.randrange(len(order)))
        total -= pod.gpu_request_milli
    return order


def make_policy(name: str, shapes_from: tuple[TracePod, ...], rng: random.Random) -> Policy:
    if name == "random":
        return random_policy(rng)
    if name == "bestfit":
        return bestfit_policy()
    if name == "fgd":
        return fgd_policy(Fragmentation(typical_shapes(shapes_from)))
    raise ValueError(f"unknown B1 policy {name!r} (known: random, bestfit, fgd)")


def run_b1(nodes: tuple[TraceNode, ...], pods: tuple[TracePod, ...], policy: str, seed: int) -> B1Run:
    """Replay ``pods`` on ``nodes`` with ``policy`` under the B1 protocol for ``seed``."""
    rng = random.Random(seed)
    cluster = fresh_cluster(nodes)
    rng.shuffle(cluster)
    capacity = 1000 * sum(len(node.gpu_free) for node in cluster)
    sequence = workload(pods, capacity, rng)
    choose = make_policy(policy, pods, rng)
    arrived = allocated = failed = 0
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for pod in sequence:
        arrived += pod.gpu_request_milli
        candidates: list[Candidate] = []
        for index, node in enumerate(cluster):
            candidates.extend((index, gpus) for gpus in gpu_choices(node, pod))
        if candidates:
            index, gpus = choose(cluster, pod, candidates)
            bind(cluster[index], pod, gpus)
            allocated += pod.gpu_request_milli
        else:
            failed += 1
        bucket = int(100 * arrived / capacity + 0.5)
        sums[bucket] = sums.get(bucket, 0.0) + 100 * allocated / capacity
        counts[bucket] = counts.get(bucket, 0) + 1
    curve = tuple((pct, sums[pct] / counts[pct]) for pct in sorted(sums))
    return B1Run(policy=policy, seed=seed, pods_tried=len(sequence), failed=failed, curve=curve)
