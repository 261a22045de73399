"""The per-job report credential: a token that lets a job's own pods report its checkpoints, and nothing else.

A token names its job and carries an HMAC of the job id under the site's ``SECRET_KEY`` (the construction of
Django's password-reset tokens), so nothing secret is stored: the loop derives the same token whenever it binds
the job again, and the API checks one by recomputing it. It is accepted only for the job it names and only
while that job has not ended (:func:`job_for_token`), so ending the job revokes it; the Kubernetes gateway also
deletes the Secret that holds it when the job's pods are removed for good.
"""

from __future__ import annotations

from django.utils.crypto import constant_time_compare, salted_hmac

from jobs.models import Job
from scheduler.core.model.vocabulary import TERMINAL_JOB_STATES

_SALT = "microcosm.jobs.checkpoint-report"
PREFIX = "mcj"  # tells a job credential from a user's API token at a glance


def job_token(job_id: int) -> str:
    """The report credential of job ``job_id``: ``mcj.<id>.<hmac>``."""
    return f"{PREFIX}.{job_id}.{_digest(job_id)}"


def token_job_id(token: str) -> int | None:
    """The job a well-formed, authentic token names; None for anything else (malformed, forged)."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1].isdigit() or len(parts[1]) > 19:
        return None
    job_id = int(parts[1])
    return job_id if constant_time_compare(parts[2], _digest(job_id)) else None


def job_for_token(token: str) -> Job | None:
    """The live job a token may report for: authentic and not ended (an ended job's credential is revoked)."""
    job_id = token_job_id(token)
    if job_id is None:
        return None
    return Job.objects.select_related("team").exclude(state__in=TERMINAL_JOB_STATES).filter(pk=job_id).first()


def _digest(job_id: int) -> str:
    return salted_hmac(_SALT, str(job_id), algorithm="sha256").hexdigest()
