"""Celery tasks of billing: thin wrappers over the services. A database outage is logged once and returned as
``{"outage": ...}``, not raised (:func:`scheduler.bridge.outage.outage_guarded`): the next beat closes what is due."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from billing.services import ledger_close_due
from scheduler.bridge.outage import DATABASE, outage_guarded


@shared_task(name="billing.ledger_close")
@outage_guarded(uses=(DATABASE,))
def ledger_close_task() -> dict[str, object]:
    """Close every ledger interval that is due now (idempotent, safe on several workers at once)."""
    summary = ledger_close_due(now=timezone.now())
    return {
        "allocations": summary.allocations,
        "entries": summary.entries,
        "gpu_hours": str(summary.gpu_hours),
        "lost_work": summary.lost_work,
        "skipped": summary.skipped,
        "failed": summary.failed,
    }
