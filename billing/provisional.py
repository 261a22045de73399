"""The hours the ledger has not closed yet, priced as the ledger will price them, never written.

The closer lags by design: a live allocation is closed through the last whole hour before ``now − 300 s``
and an ended one once its end is that old (billing.services, ``LIVE_SETTLE_S``). Without this, the month's
page was empty until its first hour closed while the dashboard already showed a cost. So the finance page,
its downloads and the team dashboard add, for every allocation, the entries from its watermark (the end of
its last closed entry) up to ``now`` (or its end), built by ``ledger_entries_build`` — the closer's own
function, so units, GPU-hours, prices, cost rounding and the borrowed flag are the ledger's — and marked
*provisional*. Once the closer has run, the same hours come back as ledger entries with the same figures
(for an allocation that ended, to the micro-dollar; a live one's open hour keeps growing until it closes).
Lost work is recorded only by the closer, so it is never provisional.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, F, Max, OuterRef, Q

from billing.errors import LedgerInputError
from billing.models import LedgerEntry
from billing.services import TeamHoldings, ledger_entries_build, price_book_load
from jobs.models import Allocation


def provisional_entries(*, now: datetime, since: datetime) -> list[LedgerEntry]:
    """Unsaved entries for what every allocation held up to ``now`` beyond its watermark, starting at or after
    ``since`` (pass the period's start); an allocation that cannot be sized is left to the closer to report."""
    closed_to_end = LedgerEntry.objects.filter(allocation=OuterRef("pk"), interval_end=OuterRef("ended_at"))
    allocations = list(
        Allocation.objects.filter(started_at__lt=now)
        .filter(Q(ended_at__isnull=True) | (Q(ended_at__gt=F("started_at")) & ~Exists(closed_to_end)))
        .select_related("job__team", "job__project", "node__gpu_model")
        .order_by("started_at", "pk")
    )
    if not allocations:
        return []
    watermarks = dict(
        LedgerEntry.objects.filter(allocation_id__in=[a.pk for a in allocations])
        .values("allocation_id")
        .annotate(end=Max("interval_end"))
        .values_list("allocation_id", "end")
    )
    prices = price_book_load()
    earliest = min(watermarks.get(a.pk) or a.started_at for a in allocations)
    teams = TeamHoldings(since=min(earliest, now), until=now)
    entries: list[LedgerEntry] = []
    for allocation in allocations:
        closed_until = watermarks.get(allocation.pk)
        until = allocation.ended_at if allocation.ended_at is not None and allocation.ended_at <= now else now
        if closed_until is not None and closed_until >= until:
            continue
        try:
            built = ledger_entries_build(
                allocation=allocation, closed_until=closed_until, until=until, prices=prices, teams=teams
            )
        except LedgerInputError:
            continue  # the allocation cannot be sized (LedgerInputError): the closer logs and reports it
        entries.extend(entry for entry in built if entry.interval_start >= since)
    return entries
