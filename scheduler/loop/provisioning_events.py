"""A job's node requests on its timeline: a ``node_request`` job event for every step of a request the loop records
(:mod:`scheduler.loop.provisioning`) — asked, provisioned, its nodes joined, failed or revoked with the autoscaler's
words, timed out, withdrawn — and for every on-demand node it brought that is released, so the team that asked sees
where its on-demand capacity came from and when its cost stopped (docs/deploy.md, On-demand capacity through the
cloud's autoscaler).

Written in the same transaction as the row's own change, so the timeline never tells a step the row does not have.
The words are the row's (``NodeRequest.message``: the autoscaler's or the loop's), never rewritten here; the job page
words them (:func:`jobs.selectors.timeline.event_text`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobs.models import JobEvent
from scheduler.autoscaled import NodeRequest
from scheduler.core.model.vocabulary import EventType
from scheduler.models import Node

# The ``state`` of the event of a released node (the others carry the request's NodeRequestStatus).
RELEASED = "released"


def request_event(row: NodeRequest, at: datetime) -> None:
    """The event of ``row``'s step just recorded (its state, message and nodes as they are now)."""
    details: dict[str, Any] = {
        "state": str(row.state),
        "request": str(row.pk),
        "pool": row.pool.name,
        "nodes": row.nodes,
        "gpus_per_node": row.gpus_per_node,
    }
    if row.message:
        details["message"] = row.message
    if row.node_names:
        details["node_names"] = [str(name) for name in row.node_names]
    if row.state == "pending":
        details["arrives_at"] = row.arrives_at.isoformat()
    JobEvent.objects.create(job_id=row.job_id, type=EventType.NODE_REQUEST, at=at, details=details)


def releases_event(names: Iterable[str], at: datetime) -> None:
    """An event on the job whose request brought each node of ``names`` (a node no request brought has none: the
    simulated fleet's own, or one whose request the inventory never linked)."""
    nodes = Node.objects.filter(name__in=list(names), node_request__isnull=False).select_related("node_request__pool")
    events = []
    for node in nodes.order_by("name"):
        request = node.node_request
        assert request is not None  # filtered above
        details = {
            "state": RELEASED,
            "request": str(request.pk),
            "pool": request.pool.name,
            "node": node.name,
            "idle_since": node.idle_since.isoformat() if node.idle_since else None,
        }
        events.append(JobEvent(job_id=request.job_id, type=EventType.NODE_REQUEST, at=at, details=details))
    JobEvent.objects.bulk_create(events)
