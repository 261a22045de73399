"""The job report credential as a DRF authentication: ``Authorization: Bearer mcj.<job id>.<hmac>``
(:mod:`jobs.credentials`).

Only the checkpoint report (``POST /api/v1/jobs/{id}/checkpoints/``, :class:`jobs.api.checkpoints.CheckpointsView`)
lists this class; it is in no default, so on every other endpoint a job credential is no credential at all
(401). What it yields is a :class:`JobPrincipal`, not a user: it has no team, no role and no id that any
scoped selector would match, so even a view that forgot to refuse it would find nothing for it.

Answers: no ``Bearer`` header → not attempted (the view answers 401 with ``WWW-Authenticate: Bearer``); a
malformed, forged or altered token → 401; the credential of a job that has ended (or no longer exists) → 401,
"revoked": ending the job revokes it (:func:`jobs.credentials.job_for_token`). A valid credential used for
another job is the view's 403 (:class:`jobs.api.permissions.ReportsForThisJob`).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from jobs.api.schema import JOB_CREDENTIAL
from jobs.credentials import PREFIX, job_for_token, token_job_id
from jobs.models import Job

KEYWORD = "Bearer"
FORMAT = f"{PREFIX}.<job id>.<hmac>"


class JobPrincipal:
    """Who calls with a job credential: the pods of one live job. Not a user (no pk, no team, no role)."""

    is_authenticated = True
    is_anonymous = False
    is_active = False  # no user account behind it: nothing that checks for an active user accepts it
    is_staff = False
    is_superuser = False
    pk = None
    id = None
    username = ""

    def __init__(self, job: Job) -> None:
        self.job = job

    @property
    def job_id(self) -> int:
        return self.job.pk

    def __str__(self) -> str:
        return f"job {self.job.pk}"


def revoked_message(job_id: int) -> str:
    return f"The credential of job {job_id} is revoked: the job has ended, so it takes no more reports."


class JobCredentialAuthentication(BaseAuthentication):
    """``Authorization: Bearer mcj.<job id>.<hmac>`` → ``(JobPrincipal(job), token)`` for a live job."""

    def authenticate(self, request: Request) -> tuple[JobPrincipal, str] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed(f"Send one job credential: Authorization: {KEYWORD} {FORMAT}.")
        try:
            token = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"A job credential is ASCII text: {FORMAT}.") from None
        job_id = token_job_id(token)
        if job_id is None:
            raise AuthenticationFailed(
                f"Invalid job credential: use the one Microcosm mounted into the job's pods ({FORMAT})."
            )
        job = job_for_token(token)
        if job is None:
            raise AuthenticationFailed(revoked_message(job_id))
        return JobPrincipal(job), token

    def authenticate_header(self, request: Request) -> str:
        # Makes an unauthenticated answer a 401 (with this challenge) rather than a 403.
        return f'{KEYWORD} realm="microcosm-job"'


class JobCredentialScheme(OpenApiAuthenticationExtension):
    """The credential in the OpenAPI schema (registered when this module is imported, with the view)."""

    target_class = JobCredentialAuthentication
    name = JOB_CREDENTIAL

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": FORMAT,
            "description": "A job's own report credential (mounted into its pods as a Kubernetes Secret): reports "
            "checkpoints for that job only, and is revoked when the job ends.",
        }
