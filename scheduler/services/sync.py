"""The inventory made to match the cluster as the gateway observes it: nodes registered, their states changed.

A sync writes only what an observation says; the shape of a node is :func:`scheduler.services.fleet.node_register`'s
to check, and a state change is :func:`scheduler.node_states.node_state_observe`'s to decide and audit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from scheduler.core.model.vocabulary import NodeState
from scheduler.errors import InventoryError
from scheduler.gateways.protocol import Observation
from scheduler.models import Node
from scheduler.node_states import node_state_observe
from scheduler.services.fleet import node_register


@dataclass
class SyncReport:
    """What ``cluster_sync`` saw and changed; ``as_json()`` is what ``cluster sync --json`` prints."""

    nodes: list[dict[str, object]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # nodes the inventory cannot hold, with the reason

    def as_json(self) -> dict[str, object]:
        return {"nodes": self.nodes, "gone": self.gone, "skipped": self.skipped}


def cluster_sync(*, observation: Observation) -> SyncReport:
    """Make the inventory match ``observation``: every observed node registered with its shape and current
    MIG layouts (``node_register``), and its state changed as :func:`scheduler.node_states.observed_change`
    says (draining under an interruption notice, gone when no longer reported; an admin's cordon or drain
    holds), each change saved and audited.

    A node the inventory cannot hold (an unknown GPU model) is skipped and reported, never guessed at.
    """
    report = SyncReport()
    at = datetime.fromtimestamp(observation.observed_at, tz=UTC)
    seen: set[str] = set()
    existing = {node.name: node for node in Node.objects.all()}
    for obs in observation.nodes:
        row = existing.get(obs.name)
        if obs.price_per_gpu_hour is not None:
            price: Decimal = Decimal(str(obs.price_per_gpu_hour))
        else:
            price = row.price_per_gpu_hour if row is not None else Decimal(0)
        try:
            node = node_register(
                name=obs.name,
                gpu_model=obs.gpu_model,
                gpu_count=obs.gpu_count,
                interconnect=obs.interconnect,
                leaf_switch=obs.leaf,
                spine=obs.spine,
                tier=obs.tier,
                price_per_gpu_hour=price,
                zone=obs.zone,
                labels=dict(obs.labels),
                mig_layouts={i: [list(pair) for pair in layout] for i, layout in enumerate(obs.mig) if layout},
                fabric=obs.fabric,
                fabric_devices=obs.fabric_devices,
                placement_group=obs.placement_group,
                pool=obs.pool,
            )
        except InventoryError as exc:
            report.skipped.append(f"{obs.name}: {exc}")
            continue
        seen.add(node.name)
        notice = obs.interruption.source if obs.interruption is not None else None
        node_state_observe(node=node, reported=True, notice=notice, at=at)
        report.nodes.append(
            {
                "name": node.name,
                "gpu_model": obs.gpu_model,
                "gpus": obs.gpu_count,
                "tier": obs.tier,
                "state": str(node.state),
                "mig": {str(i): [list(p) for p in layout] for i, layout in enumerate(obs.mig) if layout},
                "mig_state": str(obs.mig_status.state),
            }
        )
    observed = {o.name for o in observation.nodes}
    for name, row in sorted(existing.items()):
        if name not in observed and node_state_observe(node=row, reported=False, notice=None, at=at) == NodeState.GONE:
            report.gone.append(name)
    return report
