"""Celery tasks of the demo: its job feed (scheduled by ``portal/demo_settings.py`` only). A database outage is
logged once and returned as ``{"outage": ...}``, not raised (:func:`scheduler.loop.outage.outage_guarded`).

The task keeps the name it had when the demo lived in the portal, ``portal.demo_feed``: beat schedules name
tasks by that string, and a schedule written before the move must still find it."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from demo.feed import demo_feed
from scheduler.loop.outage import DATABASE, outage_guarded


@shared_task(name="portal.demo_feed")
@outage_guarded(uses=(DATABASE,))
def demo_feed_task() -> dict[str, Any]:
    job = demo_feed()
    return {"submitted": job.pk if job is not None else None}
