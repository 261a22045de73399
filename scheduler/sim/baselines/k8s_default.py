"""``k8s-default``: kube-scheduler's default scoring applied to GPUs as an extended resource.

Rules (on top of :mod:`scheduler.sim.baselines.common`: no MIG, no quotas; priority order and kube-scheduler's
priority preemption, :mod:`scheduler.sim.baselines.preempt`):

- **no gang**: each replica is a pod scheduled on its own (the replay still binds them together — see
  ``common``);
- **least allocated** (NodeResourcesFit, ``LeastAllocated``): a replica goes to the node that keeps the
  largest share of its GPUs free after placing it, ``(free − need) / GPUs``; ties go to the first node in
  the cluster's order (kube-scheduler breaks ties at random; a fixed order keeps runs deterministic);
- **no topology**: NVLink, leaf and spine are not looked at; the replica takes the node's lowest free GPUs.

kube-scheduler's shipped configuration scores only CPU and memory; scoring GPUs by least-allocated stands for
the spreading those scores cause when pods ask for CPU and memory in proportion to their GPUs (the spec's
definition of this baseline).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node, Snapshot
from scheduler.sim.baselines.common import Free, Need
from scheduler.sim.baselines.preempt import plan_by_priority

NAME = "k8s-default"


def _least_allocated(free: Free, fitting: Sequence[tuple[Node, Need]]) -> tuple[Node, Need]:
    best = fitting[0]
    best_score = -1.0
    for node, need in fitting:
        score = (len(free.whole[node.name]) - need.gpus) / node.gpu_count
        if score > best_score:
            best, best_score = (node, need), score
    return best


def k8s_default(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """One cycle of the ``k8s-default`` baseline (module rules)."""
    return plan_by_priority(snapshot, policy, name=NAME, choose=_least_allocated)
