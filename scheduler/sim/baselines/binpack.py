"""``binpack``: whole-GPU best-fit packing, gang-aware (as Volcano's binpack + gang plugins).

Rules (on top of :mod:`scheduler.sim.baselines.common`: FIFO, no MIG, no preemption, no quotas):

- **gang-aware**: a job's replicas are placed as one unit, bound all together or not at all, and first on
  one node: the node that holds **every** replica with the fewest GPUs left free (best fit);
- otherwise replica by replica, each on the node with the **fewest free GPUs** that still fits it
  (most allocated), so gangs fill partly used nodes before touching empty ones;
- ties go to the first node in the cluster's order; a replica takes the node's lowest free GPUs;
- no topology beyond "one node first": leaves and spines are not looked at.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Slots, Snapshot
from scheduler.sim.baselines.common import Free, Need, place_each, plan_fifo

NAME = "binpack"


def _most_allocated(free: Free, fitting: Sequence[tuple[Node, Need]]) -> tuple[Node, Need]:
    return min(fitting, key=lambda candidate: len(free.whole[candidate[0].name]))


def _place(free: Free, job: Job, candidates: Sequence[tuple[Node, Need]]) -> Slots | None:
    if job.replicas > 1:
        whole_gang = [
            (node, need) for node, need in candidates if len(free.whole[node.name]) >= need.gpus * job.replicas
        ]
        if whole_gang:
            node, need = min(whole_gang, key=lambda c: len(free.whole[c[0].name]) - c[1].gpus * job.replicas)
            return tuple(free.take_whole(node.name, need.gpus) for _ in range(job.replicas))
    return place_each(free, job, candidates, _most_allocated)


def binpack(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """One cycle of the ``binpack`` baseline (module rules)."""
    return plan_fifo(snapshot, policy, _place, name=NAME)
