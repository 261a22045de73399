"""B1 placement policies, reimplemented from the FGD paper's descriptions (no code copied).

A policy picks, among the feasible (node, GPU set) candidates of one pod, the one to bind. Scores are
"lower is better"; ties go to the earliest candidate, i.e. the earliest node in the run's seeded node order.

- ``random``: a uniformly random feasible node, then a uniformly random feasible GPU set on it.
- ``bestfit``: least resources left after placement: mean of the node's free CPU share and free GPU share.
  Inside the node, the GPU with the least free milli that still fits (the tightest).
- ``fgd``: the (node, GPUs) whose placement increases the node's fragmentation for the typical shapes least.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from scheduler.sim.openb.cluster import GPU_MILLI, NodeState
from scheduler.sim.openb.fragmentation import Fragmentation
from scheduler.sim.traces import TracePod

Candidate = tuple[int, tuple[int, ...]]  # (node index, GPU indexes)
Policy = Callable[[Sequence[NodeState], TracePod, Sequence[Candidate]], Candidate]


def random_policy(rng: random.Random) -> Policy:
    def choose(nodes: Sequence[NodeState], pod: TracePod, candidates: Sequence[Candidate]) -> Candidate:
        node_index = rng.choice(sorted({index for index, _ in candidates}))
        on_node = [candidate for candidate in candidates if candidate[0] == node_index]
        return rng.choice(on_node)

    return choose


def bestfit_policy() -> Policy:
    def score(nodes: Sequence[NodeState], pod: TracePod, candidate: Candidate) -> tuple[float, int]:
        node = nodes[candidate[0]]
        cpu_left = (node.cpu_free - pod.cpu_milli) / node.cpu_milli
        capacity = GPU_MILLI * len(node.gpu_free)
        gpu_left = (sum(node.gpu_free) - pod.gpu_request_milli) / capacity
        tightest = min((node.gpu_free[index] for index in candidate[1]), default=0)
        return (cpu_left + gpu_left) / 2, tightest

    def choose(nodes: Sequence[NodeState], pod: TracePod, candidates: Sequence[Candidate]) -> Candidate:
        return min(candidates, key=lambda candidate: score(nodes, pod, candidate))

    return choose


def fgd_policy(fragmentation: Fragmentation) -> Policy:
    def increase(nodes: Sequence[NodeState], pod: TracePod, candidate: Candidate) -> float:
        node = nodes[candidate[0]]
        before = fragmentation.of(node.model, node.cpu_free, tuple(sorted(node.gpu_free)))
        after_gpus = list(node.gpu_free)
        for index in candidate[1]:
            after_gpus[index] -= pod.gpu_milli
        after = fragmentation.of(node.model, node.cpu_free - pod.cpu_milli, tuple(sorted(after_gpus)))
        return after - before

    def choose(nodes: Sequence[NodeState], pod: TracePod, candidates: Sequence[Candidate]) -> Candidate:
        return min(candidates, key=lambda candidate: increase(nodes, pod, candidate))

    return choose


POLICY_NAMES = ("random", "bestfit", "fgd")
