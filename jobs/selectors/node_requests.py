"""A job's node request as its team sees it: the on-demand nodes asked for it, of which pool, and when they are
expected (scheduler.autoscaled; the loop records them, scheduler/loop/provisioning.py).

Read only for a job the caller already holds through a scoped selector (:func:`jobs.selectors.jobs.job_get_for_user`,
the job page's own look-up), so the request is scoped as its job is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.models import Job
from scheduler.models import NodeRequest


@dataclass(frozen=True)
class JobNodeRequest:
    """The job's latest node request."""

    state: str  # scheduler.autoscaled.NodeRequestStatus
    pool: str
    nodes: int
    gpus_per_node: int
    requested_at: datetime
    arrives_at: datetime  # the estimate when it was asked
    state_since: datetime
    message: str
    node_names: list[str]

    @property
    def in_flight(self) -> bool:
        return self.state in ("pending", "provisioned")


def job_node_request(*, job: Job) -> JobNodeRequest | None:
    """The latest node request of ``job`` (a job its caller may see), or None when it never had one."""
    row = NodeRequest.objects.filter(job_id=job.pk).select_related("pool").order_by("-requested_at", "-id").first()
    if row is None:
        return None
    return JobNodeRequest(
        state=row.state,
        pool=row.pool.name,
        nodes=row.nodes,
        gpus_per_node=row.gpus_per_node,
        requested_at=row.requested_at,
        arrives_at=row.arrives_at,
        state_since=row.state_since,
        message=row.message,
        node_names=[str(name) for name in row.node_names or []],
    )
