"""A waiting job's start estimate and reason in templates, by the one rule of :mod:`jobs.selectors.waiting`."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from jobs.models import Job
from jobs.selectors.waiting import EtaDisplay
from jobs.selectors.waiting import eta_display as _eta_display
from jobs.selectors.waiting import waiting_reason as _waiting_reason

register = template.Library()


@register.simple_tag
def eta_display(eta_at: datetime | None, now: datetime | None = None) -> EtaDisplay:
    """``{% eta_display job.eta_at now as eta %}``: ``eta.at`` (None unless still ahead) and ``eta.text``;
    ``now`` defaults to the time of rendering."""
    return _eta_display(eta_at, now or timezone.now())


@register.filter
def waiting_reason(job: Job) -> str:
    """``{{ job|waiting_reason }}``: why a pending job waits (empty for any other job)."""
    return _waiting_reason(job) or ""
