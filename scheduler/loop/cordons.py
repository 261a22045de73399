"""An admin's cordon or drain carried to the cluster (docs/node-states.md, On Kubernetes).

The inventory's state is what closes a node to Microcosm's own placement (:mod:`scheduler.bridge.snapshot`); the
cluster is told too, as ``kubectl cordon`` would, so that no other scheduler places work there either. Each cycle
compares the two: a node an admin holds that the cluster still reports open gets a cordon; a node that carries
Microcosm's cordon but that no admin holds any more (marked ready) gets it lifted. Only Microcosm's own cordon is
ever lifted (:meth:`scheduler.gateways.protocol.ClusterGateway.node_cordon`).
"""

from __future__ import annotations

from django.db.models import Q

from scheduler.core.model.vocabulary import NodeState, NodeStateSource
from scheduler.gateways.protocol import Observation
from scheduler.loop.apply import CordonOp
from scheduler.models import Node

# The rows scheduler.models.admin_holds says an admin holds, as one query.
_HELD = Q(state=NodeState.CORDONED) | Q(state=NodeState.DRAINING, state_source=NodeStateSource.ADMIN)


def cordons_wanted(observation: Observation) -> list[CordonOp]:
    """The cordons to set and lift so that the cluster shows what the admins decided. Read-only."""
    held = set(Node.objects.filter(_HELD).values_list("name", flat=True))
    ops = []
    for node in observation.nodes:
        if node.name in held and node.schedulable and not node.cordoned_by_admin:
            ops.append(CordonOp(node=node.name, cordoned=True))
        elif node.name not in held and node.cordoned_by_admin:
            ops.append(CordonOp(node=node.name, cordoned=False))
    return ops
