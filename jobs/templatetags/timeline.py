"""``{{ event|event_text }}``: a job event as one line of the job page's timeline (:mod:`jobs.selectors.timeline`)."""

from __future__ import annotations

from django import template

from jobs.models import JobEvent
from jobs.selectors.timeline import event_text as _event_text

register = template.Library()


@register.filter
def event_text(event: JobEvent) -> str:
    return _event_text(event)
