"""Utilization samples: one per reading of a known node, with the interval since the node's last one."""

from __future__ import annotations

import pytest

from scheduler.models import UtilizationSample
from scheduler.services.samples import utilization_record
from tests.scheduler.loop_helpers import fleet

pytestmark = pytest.mark.django_db


def test_utilization_samples_record_intervals(team, clock):
    gateway = fleet(clock)
    assert utilization_record(readings=gateway.utilization(), at=clock.now) == 3
    clock.advance(30)
    utilization_record(readings=gateway.utilization(), at=clock.now)
    latest = UtilizationSample.objects.filter(node__name="a100-res-1").order_by("-at").first()
    assert latest.interval_s == 30.0 and latest.gpus == 8.0 and latest.gpu_class == "A100"
