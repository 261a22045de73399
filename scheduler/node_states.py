"""A node's state, and who may change it (docs/node-states.md).

=========  =====================================================  ==============================================
state      means                                                  set by
=========  =====================================================  ==============================================
ready      takes new work                                         an admin (mark ready); the cluster sync, for a
                                                                  node reported again or a notice withdrawn
cordoned   takes no new work; running work stays                 an admin (``kubectl cordon``, Slurm's
                                                                  ``scontrol update state=drain`` without jobs)
draining   takes no new work; running jobs are asked to           an admin (``kubectl drain``, Slurm's DRAIN), or
           checkpoint and stop, then requeued whole at the        a spot interruption notice
           head of their priority
gone       the cluster no longer reports the node                 the cluster sync
=========  =====================================================  ==============================================

An admin's cordon or drain *holds*: the sync never lifts it, not even when the node vanishes and comes back
(Slurm keeps a drained node drained across a reboot; ``kubectl drain`` leaves the node cordoned until
``kubectl uncordon``). Only an admin marking the node ready ends it. A state a notice or the sync set is the
cluster's to change again. Every change is a ``save()`` of the row, so the audit trail (audit/) records it with its
actor, or with the tool that made it when no person did.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from audit.context import acting
from scheduler.core.model.vocabulary import NodeState, NodeStateSource
from scheduler.models import Node, admin_holds

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_REASON = 200  # Node.state_reason's length


@dataclass(frozen=True, slots=True)
class StateChange:
    state: NodeState
    source: NodeStateSource
    reason: str


def observed_change(*, state: str, source: str, reported: bool, notice: str | None) -> StateChange | None:
    """The cluster sync's rule for one node: the change what the cluster shows calls for, or None.

    ``reported``: the cluster reports the node; ``notice``: the source of an interruption notice on it (None:
    none). A notice drains any node that is not already draining (an admin's cordon included: the node is going
    away, so its jobs must leave); a withdrawn notice makes the node ready again; a node no longer reported is
    gone unless an admin holds it; a gone node reported again is ready.
    """
    held = admin_holds(state=state, source=source)
    if reported and notice is not None:
        if state == NodeState.DRAINING:
            return None
        return StateChange(NodeState.DRAINING, NodeStateSource.NOTICE, f"interruption notice ({notice})"[:MAX_REASON])
    if held:
        return None
    if not reported:
        if state == NodeState.GONE:
            return None
        return StateChange(NodeState.GONE, NodeStateSource.CLUSTER, "no longer reported by the cluster")
    if state == NodeState.GONE or (state == NodeState.DRAINING and source == NodeStateSource.NOTICE):
        return StateChange(NodeState.READY, NodeStateSource.CLUSTER, "")
    return None


def node_state_observe(*, node: Node, reported: bool, notice: str | None, at: datetime) -> NodeState | None:
    """Apply :func:`observed_change` to ``node`` (saved, audited as the cluster sync); return the new state, or
    None when nothing changed."""
    change = observed_change(state=node.state, source=node.state_source, reported=reported, notice=notice)
    if change is None:
        return None
    with acting(actor=None, via="interruption notice" if change.source == NodeStateSource.NOTICE else "cluster sync"):
        _save(node, change, at)
    return change.state


def node_cordon(*, node: Node, actor: User | None, reason: str = "", at: datetime | None = None) -> bool:
    """An admin closes ``node`` to new work; running work stays. Holds until :func:`node_mark_ready`.

    A draining node stays draining (a cordon is less than a drain). Returns whether the node changed."""
    if node.state == NodeState.DRAINING:
        return False
    return _admin_set(node, NodeState.CORDONED, actor, reason, at)


def node_drain(*, node: Node, actor: User | None, reason: str = "", at: datetime | None = None) -> bool:
    """An admin drains ``node``: closed to new work, and the next scheduling cycle asks every job on it to
    checkpoint and stop within the loop's eviction grace, then requeues it whole at the head of its priority
    (scheduler.loop.notice). Holds until :func:`node_mark_ready`. Returns whether the node changed."""
    return _admin_set(node, NodeState.DRAINING, actor, reason, at)


def node_mark_ready(*, node: Node, actor: User | None, at: datetime | None = None) -> bool:
    """An admin ends a cordon or drain: ``node`` takes new work again. A node under an interruption notice is
    drained again by the next sync; a node the cluster does not report stays closed to work (it is absent).
    Returns whether the node changed."""
    return _admin_set(node, NodeState.READY, actor, "", at)


def _admin_set(node: Node, state: NodeState, actor: User | None, reason: str, at: datetime | None) -> bool:
    who = f"by {actor.get_username()}" if actor is not None else "by an admin"
    text = f"{who}: {reason.strip()}" if reason.strip() else who
    change = StateChange(state, NodeStateSource.ADMIN, text[:MAX_REASON] if state != NodeState.READY else "")
    with transaction.atomic():
        row = Node.objects.select_for_update().get(pk=node.pk)
        if row.state == state and (state == NodeState.READY or row.state_source == NodeStateSource.ADMIN):
            return False  # nothing to lift, or already held so by an admin: the first reason stands
        with acting(actor=actor, via="admin"):
            _save(row, change, at or timezone.now())
    node.refresh_from_db()
    return True


def _save(node: Node, change: StateChange, at: datetime) -> None:
    node.state = change.state
    node.state_source = change.source
    node.state_reason = change.reason
    node.state_changed_at = at
    node.save(update_fields=["state", "state_source", "state_reason", "state_changed_at", "updated_at"])
