"""Typed errors of the teams services and the organisation-file loader.

The edges (management commands, views) turn these into messages without re-wording them: every message is
already written for the person who has to fix the file or the database.
"""

from __future__ import annotations

from scheduler.specs.files.text import SpecFileError


class TeamsError(Exception):
    """Base class of every error the teams app raises on purpose."""


class OrgFileError(TeamsError, SpecFileError):
    """An organisation file cannot be read or parsed (missing, unsupported type, syntax error).

    The spec-file reader's error, as a teams error: ``str(error)`` is ``path:line:column: message`` when the
    reader knows the position, else ``path: message``.
    """


class OrgValidationError(TeamsError):
    """An organisation file parsed but is invalid; ``errors`` holds every problem found, each with its path.

    Messages look like ``teams[1].quotas[0].burst: must be ≥ guaranteed (4)``; the file name is left to the
    caller, which knows it.
    """

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__(f"{len(self.errors)} error(s) in organisation file: " + "; ".join(self.errors))


class OrgApplyError(TeamsError):
    """Applying a valid organisation spec failed (e.g. a pruned team is still referenced by jobs).

    The whole apply was rolled back; ``errors`` names every object that blocked it.
    """

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors) + " (nothing was changed)")
