"""Settings of ``make demo`` (``manage.py demo run`` starts every process with ``--settings`` naming this).

The production settings with the embedded choices that need no server: Celery on kombu's filesystem
transport under ``var/celery/``, the file lock for single flight, the simulated fleet, and the demo job feed.
DEBUG must be on in the environment (``make demo`` sets it): the demo signs in with known passwords.
"""

from __future__ import annotations

from portal.settings import *  # noqa: F403
from portal.settings import CELERY_BEAT_SCHEDULE, SCHEDULER, VAR_DIR, filesystem_broker_options

CLUSTER_BACKEND = "simulated"
SCHEDULER = {**SCHEDULER, "lock_backend": "file"}

CELERY_BROKER_URL = "filesystem://"
CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker_options(VAR_DIR)  # every folder under var/celery/

DEMO_FEED_S = 15.0  # a new demo job every 15 s while fewer than demo.feed.FEED_MAX_PENDING wait
CELERY_BEAT_SCHEDULE = {
    **CELERY_BEAT_SCHEDULE,
    "demo-feed": {"task": "portal.demo_feed", "schedule": DEMO_FEED_S, "options": {"expires": DEMO_FEED_S}},
}
