"""The portal: settings, root URLs, the Celery app (imported here so ``@shared_task`` binds to it)."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
