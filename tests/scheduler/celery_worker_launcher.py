"""Start a real Celery worker of the project in its own process, for the single-flight test.

Usage: python -m tests.scheduler.celery_worker_launcher HOSTNAME QUEUE LOCK_NAME OBSERVE_DELAY_S

The worker uses the project's Celery app and settings (DATABASE_URL/REDIS_URL from the environment), keeps
task results, takes the scheduler lock under LOCK_NAME, and drives a simulated fleet whose observe() takes
OBSERVE_DELAY_S — so two cycles sent at once surely overlap.
"""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    hostname, queue, lock_name, delay_s = sys.argv[1:5]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.conf import settings

    from portal.celery import app
    from scheduler.gateways import gateway_override
    from scheduler.tasks import cycle_run_task
    from tests.scheduler.loop_helpers import SlowFleet

    settings.SCHEDULER = {**settings.SCHEDULER, "lock_backend": "redis", "lock_name": lock_name}
    app.conf.update(result_backend=settings.REDIS_URL, task_ignore_result=False, task_default_queue=queue)
    cycle_run_task.ignore_result = False
    with gateway_override(SlowFleet(float(delay_s))):
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
