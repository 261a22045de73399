"""B1: the FGD artifact's openb replay (``../shared/traces/fgd-atc23-expected-results/PROTOCOL.md``).

Steps, in the artifact's order of random draws (one ``random.Random(seed)`` drives them all; the artifact
uses Go's global generator the same way, so runs are comparable seed set to seed set, not seed by seed):

1. pods sorted by name, then shuffled;
2. inflation to 1.3 × GPU capacity: pods drawn uniformly with replacement from the *name-sorted original
   list* are appended while the running total plus the drawn pod's **per-GPU** milli stays within the target
   (the artifact's check; the total then grows by the pod's full request, so an 8-GPU draw may overshoot,
   and an overshoot is kept); a list above the target instead loses uniformly chosen pods until its total
   is at or below it;
3. node order permuted (ties between equal scores go to the earliest node in this order);
4. each pod tried once, in order, and never leaving; a pod that fits nowhere is dropped;
5. after every pod: arrived = cumulative GPU request of the pods tried (failed ones too) and allocation =
   allocated GPU milli, both in % of capacity.

Typical shapes (for ``fgd`` and ``microcosm``) come from the original list, before inflation.

Speed: a node's score depends only on its :data:`NodeKey`, so nodes are grouped by key (each group keeps its
members in run order) and a key's score for a pod shape is computed once and kept while the key has nodes.
"""

from __future__ import annotations

import random
from bisect import insort
from dataclasses import dataclass

from scheduler.sim.openb.cluster import NodeKey, NodeState, bind, fits, fresh_cluster, gpu_kind, scored_cpu
from scheduler.sim.openb.curve import bucket_curve
from scheduler.sim.openb.fragmentation import typical_shapes
from scheduler.sim.openb.scorers import Scorer, make_scorer
from scheduler.sim.traces import TraceNode, TracePod

TUNE = 1.3


@dataclass(frozen=True, slots=True)
class B1Run:
    """One run: ``curve`` holds (arrived %, allocation %) per whole-percent bucket, ascending."""

    policy: str
    seed: int
    pods_tried: int
    failed: int
    curve: tuple[tuple[int, float], ...]

    def unallocated_pct_at(self, arrived_pct: int = 100) -> float | None:
        """100 − allocation % in the bucket ``arrived_pct`` (None when no measurement fell in it)."""
        for pct, allocation in self.curve:
            if pct == arrived_pct:
                return round(100.0 - allocation, 2)
        return None


def workload(pods: tuple[TracePod, ...], capacity_milli: int, rng: random.Random) -> list[TracePod]:
    """The pod sequence of one run: sorted by name, shuffled, then inflated or trimmed (module steps 1–2)."""
    original = sorted(pods, key=lambda pod: pod.name)
    order = list(original)
    rng.shuffle(order)
    target = TUNE * capacity_milli
    total = sum(pod.gpu_request_milli for pod in order)
    if total == 0:
        raise ValueError("the pod list asks for no GPU: B1 inflates a list by its GPU request, so it cannot run it")
    if total < target:
        while True:
            pod = original[rng.randrange(len(original))]
            if total + pod.gpu_milli > target:
                break
            order.append(pod)
            total += pod.gpu_request_milli
        return order  # no trimming after inflation, even when a multi-GPU draw overshot (the artifact's way)
    while total > target:
        pod = order.pop(rng.randrange(len(order)))
        total -= pod.gpu_request_milli
    return order


class _Groups:
    """Nodes grouped by key, members in run order, with each key's cached scores per pod shape."""

    def __init__(self, nodes: list[NodeState]) -> None:
        self.members: dict[NodeKey, list[int]] = {}
        self.scores: dict[NodeKey, dict[tuple[object, ...], object]] = {}
        for node in sorted(nodes, key=lambda state: state.order):
            self.members.setdefault(node.key(), []).append(node.order)

    def move(self, old: NodeKey, new: NodeKey, order: int) -> None:
        members = self.members[old]
        members.remove(order)
        if not members:
            del self.members[old]
            self.scores.pop(old, None)
        if new in self.members:
            insort(self.members[new], order)
        else:
            self.members[new] = [order]


def choose(groups: _Groups, scorer: Scorer, pod: TracePod, rng: random.Random) -> int | None:
    """The run order of the node ``scorer`` binds ``pod`` to, or None when no node fits."""
    shape = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
    pod_cpu, kind = scored_cpu(pod), gpu_kind(pod)
    feasible: list[tuple[NodeKey, object]] = []
    for key in groups.members:
        cache = groups.scores.get(key)
        if cache is None:
            cache = groups.scores[key] = {}
        value = cache.get(shape, cache)
        if value is cache:
            ok = fits(key, pod)
            value = cache[shape] = (
                (scorer.score(key, pod_cpu, pod.num_gpu, pod.gpu_milli, kind) if not scorer.uniform else 0)
                if ok
                else None
            )
        if value is not None:
            feasible.append((key, value))
    if not feasible:
        return None
    if scorer.uniform:
        pick = rng.randrange(sum(len(groups.members[key]) for key, _ in feasible))
        for key, _ in feasible:
            members = groups.members[key]
            if pick < len(members):
                return members[pick]
            pick -= len(members)
    if scorer.normalize:
        raw = [int(value) for _, value in feasible]  # type: ignore[call-overload]  # normalizing scorers score ints
        low, high = min(raw), max(raw)
        span = high - low
        feasible = [
            (key, (score - low) * 100 // span if span else 0) for (key, _), score in zip(feasible, raw, strict=True)
        ]
    best = max(value for _, value in feasible)  # type: ignore[type-var]  # one scorer's scores compare with each other
    return min(groups.members[key][0] for key, value in feasible if value == best)


def run_b1(nodes: tuple[TraceNode, ...], pods: tuple[TracePod, ...], policy: str, seed: int) -> B1Run:
    """Replay ``pods`` on ``nodes`` with ``policy`` under the B1 protocol for ``seed``."""
    rng = random.Random(seed)
    cluster = fresh_cluster(nodes)
    capacity = 1000 * sum(len(node.gpu_free) for node in cluster)
    sequence = workload(pods, capacity, rng)
    permutation = list(range(len(cluster)))
    rng.shuffle(permutation)
    for node, order in zip(cluster, permutation, strict=True):
        node.order = order
    cluster.sort(key=lambda node: node.order)
    chooser = make_scorer(policy, typical_shapes(pods), rng)
    groups = _Groups(cluster)
    arrived = allocated = failed = 0
    samples: list[tuple[int, int]] = []
    for pod in sequence:
        arrived += pod.gpu_request_milli
        chosen = choose(groups, chooser, pod, rng)
        if chosen is None:
            failed += 1
        else:
            node = cluster[chosen]
            old = node.key()
            gpus = chooser.gpus(node, pod.num_gpu, pod.gpu_milli, scored_cpu(pod))
            bind(node, pod, gpus)
            groups.move(old, node.key(), chosen)
            allocated += pod.gpu_request_milli
        samples.append((arrived, allocated))
    curve = bucket_curve(samples, capacity)
    return B1Run(policy=policy, seed=seed, pods_tried=len(sequence), failed=failed, curve=curve)
