"""API throttles that fail open: DRF's per-user and per-address rates and the per-job rate of checkpoint
reports, counted in the cache (Redis in production), except that a cache which cannot be reached lets the
request through instead of answering 500.

A throttle protects the service; an outage of its counter must not become an outage of the API. The first
failure of an outage is logged (one line), then nothing until the cache answers again.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle

log = logging.getLogger(__name__)

# Whether the last request found the cache down: one log line per outage, not one per request.
_outage = {"on": False}


def _allow(throttle: SimpleRateThrottle, request: Any, view: Any, parent: type[SimpleRateThrottle]) -> bool:
    try:
        allowed = parent.allow_request(throttle, request, view)
    except Exception as error:  # the cache's client raises its own types (redis.ConnectionError, OSError, …)
        if not _outage["on"]:
            log.warning("API throttles cannot reach the cache (%s); requests are let through until it answers", error)
            _outage["on"] = True
        return True
    if _outage["on"] and getattr(throttle, "key", None) is not None:  # None: this throttle asked no cache
        log.warning("API throttles reach the cache again")
        _outage["on"] = False
    return allowed


class UserThrottle(UserRateThrottle):
    def allow_request(self, request: Any, view: Any) -> bool:
        return _allow(self, request, view, UserRateThrottle)


class AnonThrottle(AnonRateThrottle):
    def allow_request(self, request: Any, view: Any) -> bool:
        return _allow(self, request, view, AnonRateThrottle)


class JobReportThrottle(SimpleRateThrottle):
    """Checkpoint reports per job (the ``job_report`` rate), whatever its replicas or addresses: the caller is
    a job credential's principal (``jobs.api.authentication.JobPrincipal``), which has a job id and no user."""

    scope = "job_report"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        job_id = getattr(request.user, "job_id", None)
        return None if job_id is None else self.cache_format % {"scope": self.scope, "ident": f"job-{job_id}"}

    def allow_request(self, request: Any, view: Any) -> bool:
        return _allow(self, request, view, SimpleRateThrottle)
