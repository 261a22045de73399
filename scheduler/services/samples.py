"""Utilization samples: what each node's GPUs did, stored for the usage pages and the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import Max

from scheduler.gateways.protocol import UtilizationReading
from scheduler.models import Node, UtilizationSample


def utilization_record(*, readings: Sequence[UtilizationReading], at: datetime) -> int:
    """Store one :class:`UtilizationSample` per reading whose node is in the inventory; return how many."""
    nodes = {node.name: node for node in Node.objects.filter(name__in=[r.node for r in readings])}
    last = dict(
        UtilizationSample.objects.filter(node__in=nodes.values())
        .values("node_id")
        .annotate(at=Max("at"))
        .values_list("node_id", "at")
    )
    rows = []
    for reading in readings:
        node = nodes.get(reading.node)
        if node is None:
            continue
        previous = last.get(node.pk)
        rows.append(
            UtilizationSample(
                at=at,
                interval_s=max((at - previous).total_seconds(), 0.0) if previous else 0.0,
                node=node,
                gpu_class=reading.gpu_class,
                gpus=reading.gpus,
                allocated_gpus=max(reading.allocated_gpus, 0.0),
                busy_ratio=min(max(reading.busy_ratio, 0.0), 1.0),
            )
        )
    UtilizationSample.objects.bulk_create(rows)
    return len(rows)
