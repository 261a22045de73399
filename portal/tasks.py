"""Celery tasks of the portal: the demo's job feed (scheduled only when ``DEMO_FEED_S`` > 0). A database
outage is logged once and returned as ``{"outage": ...}``, not raised (:func:`scheduler.loop.outage.outage_guarded`)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from portal.demo import demo_feed
from scheduler.loop.outage import DATABASE, outage_guarded


@shared_task(name="portal.demo_feed")
@outage_guarded(uses=(DATABASE,))
def demo_feed_task() -> dict[str, Any]:
    job = demo_feed()
    return {"submitted": job.pk if job is not None else None}
