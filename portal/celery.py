"""The Celery app: broker and schedule come from ``portal/settings.py`` (the ``CELERY_*`` settings).

Run a worker and beat with ``celery -A portal worker`` / ``celery -A portal beat`` (``manage.py demo run``
starts both for the demo). Tasks live in each app's ``tasks.py`` and are found by ``autodiscover_tasks``.
"""

from __future__ import annotations

import os

from celery import Celery

# Like manage.py and wsgi.py: only a default, so a deployment's DJANGO_SETTINGS_MODULE wins.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("microcosm")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
