"""Celery tasks of the demo: its job feed and its early spot interruption (scheduled by ``portal/demo_settings.py``
only). An outage is logged once and returned as ``{"outage": ...}``, not raised
(:func:`scheduler.bridge.outage.outage_guarded`).

The task keeps the name it had when the demo lived in the portal, ``portal.demo_feed``: beat schedules name
tasks by that string, and a schedule written before the move must still find it."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from demo.feed import demo_feed
from demo.interruption import demo_spot_interruption
from scheduler.bridge.outage import CLUSTER, DATABASE, outage_guarded
from scheduler.gateways import gateway_get
from scheduler.gateways.simulated import SimulatedFleet
from scheduler.tasks import cycle_run_task


@shared_task(name="portal.demo_feed")
@outage_guarded(uses=(DATABASE,))
def demo_feed_task() -> dict[str, Any]:
    return {"submitted": [job.pk for job in demo_feed()]}


@shared_task(name="demo.spot_interruption")
@outage_guarded(uses=(DATABASE, CLUSTER))
def demo_spot_interruption_task() -> dict[str, Any]:
    """One step of the demo's spot interruption (:mod:`demo.interruption`); after a notice, a cycle at once (the loop
    handles the notice, as it does when the interruption task finds one)."""
    gateway = gateway_get()
    if not isinstance(gateway, SimulatedFleet):
        return {"skipped": "the demo's reclaim runs on the simulated fleet only"}
    done = demo_spot_interruption(gateway=gateway)
    if "noticed" in done:
        done["cycle"] = cycle_run_task()
    return done
