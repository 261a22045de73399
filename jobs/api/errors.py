"""Errors as JSON for every API response: DRF's own (``{"field": ["message"]}`` or ``{"detail": "…"}``) and
the jobs services' typed errors with the same message the pages show.

- :class:`~jobs.errors.JobSpecInvalid` → 400, one entry per spec key (``{"model.params_b": ["must be …"]}``);
  :class:`~jobs.errors.CheckpointInvalid` → 400, one entry per report field (``{"saved_at": ["…"]}``);
- :class:`~jobs.errors.JobPermissionDenied` → 403; ``JobNotFound``/``TeamNotFound`` → 404;
- :class:`~jobs.errors.JobStateError` → 409 (the job has already ended); :class:`~jobs.errors.PendingLimitReached`
  → 409 (the team or the user is at its cap of pending jobs);
- the ``Idempotency-Key`` header's refusals (:mod:`jobs.idempotency`): a malformed key → 400, a key used for
  another request → 422, a key whose first request is still running → 409 with ``Retry-After``;
- Django's ``RequestDataTooBig`` → 413 and ``TooManyFieldsSent`` → 400, as JSON (Django itself answers both with
  an HTML 400). ``portal.request_guard`` refuses such requests before a view runs; this is the same answer for
  a body read some other way.

A 500 (an exception no handler answers) under ``/api/`` is ``{"detail": "…"}`` too (``portal.errors``, the
portal's ``handler500``); a 4xx that Django answered with a page becomes JSON in ``portal.request_guard``, and a
database that is busy or unreachable answers 503 JSON with ``Retry-After`` (``portal.busy``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from jobs.errors import (
    CheckpointInvalid,
    IdempotencyKeyInFlight,
    IdempotencyKeyInvalid,
    IdempotencyKeyReused,
    JobNotFound,
    JobPermissionDenied,
    JobSpecInvalid,
    JobStateError,
    PendingLimitReached,
    TeamNotFound,
)
from jobs.selectors.rightsizing import errors_by_key


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, RequestDataTooBig):
        detail = f"request body larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"
        return Response({"detail": detail}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, TooManyFieldsSent):
        detail = f"more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields"
        return Response({"detail": detail}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, JobSpecInvalid):
        return Response(errors_by_key(exc.errors, "spec"), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, CheckpointInvalid):
        return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, JobPermissionDenied):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, JobNotFound | TeamNotFound):
        return Response({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, JobStateError | PendingLimitReached):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, IdempotencyKeyInvalid):
        return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, IdempotencyKeyReused):
        return Response({"detail": str(exc)}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
    if isinstance(exc, IdempotencyKeyInFlight):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT, headers={"Retry-After": "1"})
    return drf_exception_handler(exc, context)
