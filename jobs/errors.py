"""Typed errors of the jobs services; the edges (commands, views, API) show the message unchanged.

Every message is written for the person who has to act on it: what is wrong and what to do instead.
"""

from __future__ import annotations


class JobsError(Exception):
    """Base class of every error the jobs app raises on purpose."""


class JobSpecInvalid(JobsError):
    """A job spec that cannot be submitted; ``errors`` lists every problem as ``source: key path: reason``.

    Nothing was written.
    """

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class PendingLimitReached(JobsError):
    """The team, or the submitting user, already has as many pending jobs as ``settings.JOBS`` allows; the
    message says which cap and what to do. Nothing was written."""


class TeamNotFound(JobsError):
    """The named team does not exist."""


class JobNotFound(JobsError):
    """No job with that id (or none the actor may see)."""


class JobPermissionDenied(JobsError):
    """The actor may not do this to this team's jobs; the message names who can (the team's lead, a platform
    admin) so the person knows whom to ask. Nothing was written.

    ``field`` names the spec key the refusal is about (``priority``, ``rank``) when it is about one, so a form
    can show the message next to that field; None when it is about the actor as a whole.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class PriorityNotGranted(JobPermissionDenied):
    """The job's team is not granted that priority, or not production for that kind of job
    (:mod:`teams.grants`); whoever asks, lead or platform admin. The message says who grants it (a platform
    admin, in the admin or the organisation file) and what to use meanwhile; ``field`` is ``priority``. Nothing
    was written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="priority")


class JobStateError(JobsError):
    """The job's state does not allow the change (e.g. cancelling a completed job)."""


class CheckpointInvalid(JobsError):
    """A checkpoint report that cannot be true; ``errors`` maps each field to what is wrong with it. Nothing was
    written."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = {name: list(messages) for name, messages in errors.items()}
        super().__init__("; ".join(f"{name}: {' '.join(messages)}" for name, messages in self.errors.items()))


class LogRequestInvalid(JobsError):
    """A request for a job's log with a replica or a line count it cannot have; ``errors`` maps each parameter
    to what is wrong with it and what to ask for instead."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = {name: list(messages) for name, messages in errors.items()}
        super().__init__("; ".join(f"{name}: {' '.join(messages)}" for name, messages in self.errors.items()))


class IdempotencyKeyInvalid(JobsError):
    """An ``Idempotency-Key`` header that is empty, longer than 255 characters or not printable ASCII; the
    message says which. Nothing was written."""


class IdempotencyKeyReused(JobsError):
    """The user's ``Idempotency-Key`` was used in the last 24 hours for a different request (another body or
    another endpoint); the message says to send a new key. Nothing was written."""


class IdempotencyKeyInFlight(JobsError):
    """A request with the same ``Idempotency-Key`` is being answered right now; retry once it has its answer.
    Nothing was written."""
