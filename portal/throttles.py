"""API throttles that count atomically and fail open: DRF's per-user and per-address rates and the per-job rate
of checkpoint reports, counted in the cache (Redis in production) by ``portal.rate_counter`` instead of DRF's
read-then-write history list, except that a cache which cannot be reached lets the request through instead of
answering 500.

A throttle protects the service; an outage of its counter must not become an outage of the API. The first
failure of an outage is logged (one line), then nothing until the cache answers again.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle

from portal.rate_counter import rate_admit, rate_parse

log = logging.getLogger(__name__)

# Whether the last request found the cache down: one log line per outage, not one per request.
_outage = {"on": False}


class AtomicRateThrottle(SimpleRateThrottle):
    """DRF's rate and cache key (``scope``, ``get_cache_key``), counted by ``rate_admit``: no more than the rate
    in any period, whatever the number of parallel callers (DRF's own ``allow_request`` is read-then-write)."""

    _wait_s = 0.0

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:  # this throttle does not apply to the caller (an anonymous one for the user rate)
            return True
        limit, period_s = rate_parse(self.rate)
        try:
            admission = rate_admit(cache=self.cache, key=self.key, limit=limit, period_s=period_s, now=self.timer())
        except Exception as error:  # the cache's client raises its own types (redis.ConnectionError, OSError, …)
            if not _outage["on"]:
                log.warning("API throttles cannot reach the cache (%s); requests go through until it answers", error)
                _outage["on"] = True
            return True
        if _outage["on"]:
            log.warning("API throttles reach the cache again")
            _outage["on"] = False
        self._wait_s = admission.wait_s
        return admission.admitted

    def wait(self) -> float | None:
        return self._wait_s


class UserThrottle(AtomicRateThrottle, UserRateThrottle):
    pass


class AnonThrottle(AtomicRateThrottle, AnonRateThrottle):
    pass


class JobReportThrottle(AtomicRateThrottle):
    """Checkpoint reports per job (the ``job_report`` rate), whatever its replicas or addresses: the caller is
    a job credential's principal (``jobs.api.authentication.JobPrincipal``), which has a job id and no user."""

    scope = "job_report"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        job_id = getattr(request.user, "job_id", None)
        return None if job_id is None else self.cache_format % {"scope": self.scope, "ident": f"job-{job_id}"}
