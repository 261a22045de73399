"""``naive``: Kubernetes as shipped — GPUs are opaque integers (``nvidia.com/gpu``).

Rules (on top of :mod:`scheduler.sim.baselines.common`: no MIG, no quotas; priority order and kube-scheduler's
priority preemption, :mod:`scheduler.sim.baselines.preempt`):

- every request is whole GPUs, never shared: an inference service takes ``ceil(memory / GPU memory)``
  GPUs of the node's model, at least 1 (a 10 GiB service holds a whole 80 GB GPU);
- each replica goes on the **first node that fits**, in the cluster's node order, on its lowest free GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node, Snapshot
from scheduler.sim.baselines.common import Free, Need
from scheduler.sim.baselines.preempt import plan_by_priority

NAME = "naive"


def _first(free: Free, fitting: Sequence[tuple[Node, Need]]) -> tuple[Node, Need]:
    return fitting[0]


def naive(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """One cycle of the ``naive`` baseline (module rules)."""
    return plan_by_priority(snapshot, policy, name=NAME, choose=_first)
