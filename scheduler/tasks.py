"""Celery tasks of the scheduling loop: thin (DESIGN.md §3) — take ids or nothing, call one service, own retries.

The beat schedule (``settings.CELERY_BEAT_SCHEDULE``) runs the cycle every ``SCHEDULER_CYCLE_S``, a cluster
sync every minute, the MIG watch (the gateway's maintenance step, then a report) every 15 s, a look for spot
notices every 5 s (a cycle at once when one is not drained yet) and a utilization sample every 30 s. Each task
returns a small JSON-able summary (useful in logs and tests; results are not stored).

No task raises on an outage of Redis, the database or the cluster (:func:`scheduler.bridge.outage.outage_guarded`):
it logs one line when the outage starts and one when it ends (per worker process) and returns
``{"outage": ..., "error": ...}``. Nor is it retried: beat runs it again within its period, which is the
backoff, and a retried cycle would only meet beat's next one at the lock. Transient cluster errors are
already retried with backoff per operation inside the gateway and the apply step.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from scheduler.bridge.outage import CLUSTER, DATABASE, REDIS, outage_guarded
from scheduler.errors import FencingError
from scheduler.gateways import gateway_get
from scheduler.loop.cycle import cycle_run
from scheduler.loop.locks import single_flight
from scheduler.loop.notice import notices_unhandled
from scheduler.services.mig import cluster_maintain
from scheduler.services.samples import utilization_record
from scheduler.services.sync import cluster_sync

log = logging.getLogger(__name__)

# MIG reconfigurations pending longer than this are reported as stuck (minutes is normal, forever is not:
# docs/gpu-facts.md, MIG Manager reconfiguration flow).
MIG_STUCK_AFTER_S = 900.0


@shared_task(name="scheduler.cycle_run")
@outage_guarded(uses=(REDIS, DATABASE, CLUSTER))
def cycle_run_task() -> dict[str, Any]:
    """One scheduling cycle under the single-flight lock, renewed while it runs (a dead worker's lapses within
    ``lock_ttl_s``: :mod:`scheduler.loop.locks`); a second concurrent attempt returns ``skipped``, a cycle whose
    lock was lost or fenced returns ``abandoned`` having written nothing."""
    worker = cycle_run_task.request.hostname or ""
    with single_flight() as lease:
        if lease is None:
            log.info("cycle skipped: another cycle holds the lock")
            return {"skipped": "another cycle holds the lock", "worker": worker}
        token = lease.token
        try:
            return {**cycle_run(fence_token=token, lease=lease).as_json(), "worker": worker, "fence_token": token}
        except FencingError as exc:
            log.warning("cycle %d abandoned: %s", token, exc, extra={"cycle": token})
            return {"abandoned": str(exc), "worker": worker, "fence_token": token}


@shared_task(name="scheduler.cluster_sync")
@outage_guarded(uses=(DATABASE, CLUSTER))
def cluster_sync_task() -> dict[str, Any]:
    return cluster_sync(observation=gateway_get().observe()).as_json()


@shared_task(name="scheduler.mig_watch")
@outage_guarded(uses=(DATABASE, CLUSTER))
def mig_watch_task() -> dict[str, Any]:
    """Drive the gateway's MIG flow one step and report changes in flight and stuck ones (``cluster_maintain``)."""
    return cluster_maintain(gateway=gateway_get(), stuck_after_s=MIG_STUCK_AFTER_S)


@shared_task(name="scheduler.interruptions_handle")
@outage_guarded(uses=(DATABASE, CLUSTER))
def interruptions_handle_task() -> dict[str, Any]:
    """Spot notices are handled by the cycle (:mod:`scheduler.loop.notice`); a notice can be shorter than the
    cycle's period, so when one holds jobs the loop has not drained yet, this runs a cycle now (under the same
    single-flight lock: a cycle already running handles it instead)."""
    unhandled = notices_unhandled(observation=gateway_get().observe())
    if not unhandled:
        return {"draining": []}
    return {"draining": unhandled, "cycle": cycle_run_task()}


@shared_task(name="scheduler.utilization_sample")
@outage_guarded(uses=(DATABASE, CLUSTER))
def utilization_sample_task() -> dict[str, Any]:
    stored = utilization_record(readings=gateway_get().utilization(), at=timezone.now())
    return {"samples": stored, "backend": settings.CLUSTER_BACKEND}
