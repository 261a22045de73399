"""Writes what production waited for at a scheduling cycle (:class:`billing.models.ProductionWait`), for the
procurement advisor (``billing.procurement.production_wait_advise``; docs/billing.md, Procurement advisor).

The cycle decides what to write (:mod:`scheduler.loop.production_wait`: one row per GPU class and cause, and for
``burst`` per team) and calls :func:`production_wait_record` inside its record transaction, so the rows are
written with the rest of the cycle's decisions or not at all. A cycle that writes rows also deletes those the
advisor no longer reads (older than ``PRODUCTION_WAIT_KEPT_DAYS``): the table grows only while production waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from billing.models import PRODUCTION_WAIT_KEPT_DAYS, ProductionWait


@dataclass(frozen=True, slots=True)
class ProductionWaitRow:
    """One class and cause (and, for ``burst``, team) of production that waited at a cycle; the fields are
    :class:`~billing.models.ProductionWait`'s."""

    gpu_class: str
    cause: str
    team_id: int | None
    gpu_units: int
    jobs: int
    short_units: int = 0
    scope: str = ""
    need_units: int = 0


def production_wait_record(*, rows: Sequence[ProductionWaitRow], at: datetime, seconds: float) -> int:
    """Inside the caller's transaction: write ``rows`` as waits of ``seconds`` at ``at``, then delete the rows the
    advisor no longer reads (module doc); nothing at all when ``rows`` is empty. The model's constraints refuse a
    row whose fields do not fit its cause, and the caller's whole transaction with it. Returns the rows written."""
    if not rows:
        return 0
    ProductionWait.objects.bulk_create(
        ProductionWait(
            at=at,
            gpu_class=row.gpu_class,
            cause=row.cause,
            team_id=row.team_id,
            gpu_units=row.gpu_units,
            jobs=row.jobs,
            short_units=row.short_units,
            scope=row.scope,
            need_units=row.need_units,
            seconds=seconds,
        )
        for row in rows
    )
    # One indexed query (ProductionWait.Meta.indexes, on ``at``), only in a cycle that writes.
    ProductionWait.objects.filter(at__lt=at - timedelta(days=PRODUCTION_WAIT_KEPT_DAYS)).delete()
    return len(rows)
