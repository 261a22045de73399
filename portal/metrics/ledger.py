"""The ledger's metrics: work lost to preemption, and how far the GPU-hour ledger is behind.

``microcosm_ledger_lag_seconds`` is now minus the earliest instant some allocation still has to be closed up
to: its last closed entry's end, or its start when none is closed. The closer runs every 5 minutes and closes
live allocations through the last whole hour before now − 5 min (docs/billing.md), so a healthy ledger lags by
up to about 65 minutes; more means the closer is not running or is failing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

from django.db.models import Exists, F, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from billing.models import LedgerEntry, LostWork
from jobs.models import Allocation


def ledger_metrics(now: datetime) -> Iterator[Metric]:
    lost = CounterMetricFamily(
        "microcosm_lost_gpu_hours",
        "GPU-hours preempted work had done since its last checkpoint: work to be done again.",
    )
    total = LostWork.objects.aggregate(total=Sum("gpu_hours"))["total"] or Decimal(0)
    lost.add_metric([], float(total))
    yield lost

    lag = GaugeMetricFamily(
        "microcosm_ledger_lag_seconds", "How far behind now the GPU-hour ledger is closed (0: nothing open)."
    )
    watermark = (
        LedgerEntry.objects.filter(allocation=OuterRef("pk")).values("allocation").annotate(end=Max("interval_end"))
    )
    closed_to_end = LedgerEntry.objects.filter(allocation=OuterRef("pk"), interval_end=OuterRef("ended_at"))
    open_since = (
        Allocation.objects.filter(Q(ended_at__isnull=True) | (Q(ended_at__gt=F("started_at")) & ~Exists(closed_to_end)))
        .annotate(since=Coalesce(Subquery(watermark.values("end")), F("started_at")))
        .aggregate(earliest=Min("since"))["earliest"]
    )
    lag.add_metric([], max(0.0, (now - open_since).total_seconds()) if open_since else 0.0)
    yield lag
