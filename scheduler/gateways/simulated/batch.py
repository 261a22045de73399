"""One apply batch of the simulated fleet (:meth:`SimulatedFleet.batch`): what its operations share.

Applied one by one, each bind or reconfiguration lets the simulated cloud act first (``advance``: a walk over
every node and its state) and commits on its own, so a first cycle's thousands of binds each cost a walk of the
whole fleet and a commit. Within a batch the operations happen at one instant, read once from the fleet's clock:
the walk is made once, at the first operation that would have made it, and is not repeated, because a second
walk at the same instant changes nothing (spot draws are made once per instant, replacements and MIG
reconfigurations fall due once); what an operation of the batch can still make due at that instant is handled
where it arises (a stopping pod whose process exits at once, a MIG reconfiguration with no delay). Nodes are read
once each, by name, with their GPUs and state, and forgotten when an operation changes them. The whole batch is
one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.models import Node, SimulatedNodeState


@dataclass
class Batch:
    now: datetime  # the instant every operation of the batch happens at
    advanced: bool = False  # the walk over the fleet has been made at ``now``
    exits_due: bool = False  # an operation stopped pods whose processes exit at ``now``: remove them first
    nodes: dict[str, tuple[Node | None, SimulatedNodeState | None]] = field(default_factory=dict)

    def node(self, name: str) -> tuple[Node | None, SimulatedNodeState | None]:
        """Node ``name`` (its GPU model and GPUs loaded) and its simulated state, read once per batch."""
        if name not in self.nodes:
            row = Node.objects.select_related("gpu_model").prefetch_related("gpus").filter(name=name).first()
            state = SimulatedNodeState.objects.filter(node=row).first() if row is not None else None
            self.nodes[name] = (row, state)
        return self.nodes[name]

    def nodes_read(self, names: Iterable[str]) -> None:
        """Read every node of ``names`` not read yet, as :meth:`node` does, in three queries for all of them (the
        nodes, their GPUs, their states): the binds of a batch name hundreds of nodes at once."""
        missing = sorted(set(names) - set(self.nodes))
        if not missing:
            return
        rows = {
            n.name: n
            for n in Node.objects.select_related("gpu_model").prefetch_related("gpus").filter(name__in=missing)
        }
        states = {s.node_id: s for s in SimulatedNodeState.objects.filter(node__in=list(rows.values()))}
        for name in missing:
            row = rows.get(name)
            self.nodes[name] = (row, states.get(row.pk) if row is not None else None)

    def forget(self, name: str) -> None:
        """Node ``name`` changed (its state or its GPUs' layouts): read it again when next asked."""
        self.nodes.pop(name, None)
