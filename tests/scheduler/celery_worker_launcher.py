"""Start a real Celery worker of the project in its own process, for the single-flight test.

Usage: python -m tests.scheduler.celery_worker_launcher HOSTNAME QUEUE LOCK_NAME OBSERVE_DELAY_S [LOCK_TTL_S]

The worker uses the project's Celery app and settings (DATABASE_URL/REDIS_URL from the environment), keeps
task results, takes the scheduler lock under LOCK_NAME (with a TTL of LOCK_TTL_S when given), and drives a
simulated fleet whose observe() takes OBSERVE_DELAY_S — so two cycles sent at once surely overlap. When an
observation starts, the worker writes its HOSTNAME to the Redis key ``LOCK_NAME:observing``, so that a test
knows which worker is mid-cycle.
"""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    hostname, queue, lock_name, delay_s = sys.argv[1:5]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    import redis
    from django.conf import settings

    from portal.celery import app
    from scheduler.gateways import gateway_override
    from scheduler.gateways.protocol import Observation
    from scheduler.tasks import cycle_run_task
    from tests.scheduler.loop_helpers import SlowFleet

    class MarkedFleet(SlowFleet):
        def observe(self) -> Observation:
            marker.set(f"{lock_name}:observing", hostname)
            return super().observe()

    marker = redis.Redis.from_url(settings.REDIS_URL)
    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": lock_name}
    if len(sys.argv) > 5:
        settings.SCHEDULER = {**settings.SCHEDULER, "lock_ttl_s": float(sys.argv[5])}
    app.conf.update(result_backend=settings.REDIS_URL, task_ignore_result=False, task_default_queue=queue)
    cycle_run_task.ignore_result = False
    with gateway_override(MarkedFleet(float(delay_s))):
        app.worker_main(
            [
                "worker",
                "--pool=solo",
                f"--queues={queue}",
                f"--hostname={hostname}",
                "--loglevel=WARNING",
                "--without-mingle",
                "--without-gossip",
                "--prefetch-multiplier=1",
            ]
        )


if __name__ == "__main__":
    main()
