"""A job's own objects beside its pods — its report Secret, its rendezvous Service: created before the pods,
removed once the job never runs again, and never taken over or deleted when an object of that name is not the
job's (labelled ``app.kubernetes.io/managed-by: microcosm`` and ``microcosm.io/job: <job>``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.errors import GatewayConflict, GatewayRetryable
from scheduler.gateways.kube.nodes import labels_of
from scheduler.gateways.kube.pods import JOB_LABEL, MANAGED_BY, SCHEDULER_NAME

logger = logging.getLogger(__name__)

Read = Callable[[str, str], dict[str, Any] | None]


def owned(obj: Mapping[str, Any], job: str) -> bool:
    labels = labels_of(obj)
    return labels.get(MANAGED_BY) == SCHEDULER_NAME and labels.get(JOB_LABEL) == job


def job_object_existing(*, kind: str, purpose: str, namespace: str, name: str, job: str, read: Read) -> dict[str, Any]:
    """The object a create found already there: the job's own (returned), else a conflict; gone meanwhile: retry."""
    found = read(namespace, name)
    if found is None:
        raise GatewayRetryable(f"{kind} {namespace}/{name} vanished while being created")
    if not owned(found, job):
        raise GatewayConflict(f"{kind} {namespace}/{name} exists and is not job {job}'s {purpose}: rename or delete it")
    return found


def job_object_remove(
    *, kind: str, purpose: str, namespace: str, name: str, job: str, read: Read, delete: Callable[[str, str], None]
) -> None:
    """Delete the job's object; absent: nothing to do; one that is not the job's is left alone (and logged)."""
    found = read(namespace, name)
    if found is None:
        return
    if not owned(found, job):
        logger.warning("job %s: %s %s/%s is not Microcosm's; left alone", job, kind, namespace, name)
        return
    delete(namespace, name)
    logger.info("job %s: deleted its %s %s/%s", job, purpose, namespace, name)
