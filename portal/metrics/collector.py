"""The one collector behind ``/metrics``: every family read from the database at scrape time (package doc)."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from portal.metrics.fleet import fleet_metrics
from portal.metrics.ledger import ledger_metrics
from portal.metrics.loop import loop_metrics
from portal.metrics.queue import queue_metrics
from scheduler.bridge.cycle_stats import STATS_NAME
from scheduler.models import CycleStats


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        stats = CycleStats.objects.filter(name=STATS_NAME).first()
        yield from queue_metrics(now)
        yield from fleet_metrics(now, stats)
        yield from loop_metrics(now, stats)
        yield from ledger_metrics(now)


def registry_build() -> CollectorRegistry:
    """A registry with only :class:`DatabaseCollector`: no per-process figures (this process's memory or CPU
    would differ from one gunicorn worker to the next, and say nothing about the cluster)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return registry


REGISTRY = registry_build()
