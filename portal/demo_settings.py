"""Settings of ``make demo`` (``manage.py demo run`` starts every process with ``--settings`` naming this).

The production settings with the embedded choices that need no server: Celery on kombu's filesystem
transport under ``var/celery/``, the file lock for single flight, the simulated fleet, the demo job feed and the
demo's early spot interruption (``demo.interruption``).
DEBUG must be on in the environment (``make demo`` sets it): the demo signs in with known passwords.
"""

from __future__ import annotations

from portal.settings import *  # noqa: F403
from portal.settings import CELERY_BEAT_SCHEDULE, METRICS_TOKEN, SCHEDULER, VAR_DIR, filesystem_broker_options
from scheduler.env import env_float

CLUSTER_BACKEND = "simulated"
# Spot notices last 10 virtual minutes here, not AWS's 2: at the demo's 60× a 2-minute notice passes in 2 real
# seconds, less than the interruption task's 5 s period, and the node would go before the loop saw it. 10 real
# seconds keep the loop's view of a notice as it is on a real cluster: seen, drained, saved, then the node goes.
SCHEDULER = {
    **SCHEDULER,
    "lock_backend": "file",
    "simulated_notice_s": env_float("SIMULATED_SPOT_NOTICE_S", default=600.0, minimum=0.0, maximum=86400.0),
}

# The demo runs on a laptop's loopback: its Prometheus figures are open to read, unless a token is set
# (portal/metrics/views.py; the production settings refuse both at once).
METRICS_PUBLIC = not METRICS_TOKEN

CELERY_BROKER_URL = "filesystem://"
CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker_options(VAR_DIR)  # every folder under var/celery/

# demo.feed: the opening wave on its first call (demo/opening.py), then a job every 15 s while fewer than
# demo.feed.FEED_MAX_PENDING wait.
DEMO_FEED_S = 15.0
DEMO_INTERRUPTION_S = 20.0  # demo.interruption: until one checkpointed job has been through a spot interruption
CELERY_BEAT_SCHEDULE = {
    **CELERY_BEAT_SCHEDULE,
    "demo-feed": {"task": "portal.demo_feed", "schedule": DEMO_FEED_S, "options": {"expires": DEMO_FEED_S}},
    "demo-spot-interruption": {
        "task": "demo.spot_interruption",
        "schedule": DEMO_INTERRUPTION_S,
        "options": {"expires": DEMO_INTERRUPTION_S},
    },
}
