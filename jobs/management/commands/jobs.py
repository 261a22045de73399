"""``manage.py jobs submit --team SLUG --spec FILE.json [--as USER] [--json]`` and
``manage.py jobs list [--team SLUG] [--state STATE ...] [--json]``: the operator's edge over
:mod:`jobs.services` and :mod:`jobs.selectors.jobs`. A bad spec prints every problem and writes nothing.

The spec file is read by :func:`scheduler.specs.files.read_spec_file`, the reader every command uses for
a person's file, so an unreadable or hostile file gets one ``FILE:line:column: what is wrong`` line. Every
problem goes to stderr prefixed with the file, then the command fails (exit 1); no traceback, even when
the database refuses what validation let through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DataError, IntegrityError

from jobs.errors import JobsError, JobSpecInvalid
from jobs.models import Job
from jobs.selectors.jobs import job_list_for_operator
from jobs.services import job_submit
from scheduler.core.model.vocabulary import JobState
from scheduler.specs.files import SpecFileError, read_spec_file


class Command(BaseCommand):
    help = "Submit a job from a spec file (job keys of spec/scenario.md) or list jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{submit,list}")
        submit = actions.add_parser("submit", help="Submit the job in FILE.json to a team.")
        submit.add_argument("--team", required=True, help="The team's slug.")
        submit.add_argument("--spec", required=True, help="A JSON file with one job object.")
        submit.add_argument("--as", dest="username", help="Submit as this user (must be a member of the team).")
        submit.add_argument("--json", action="store_true", help="Print the job as one JSON object.")
        listing = actions.add_parser("list", help="List jobs, newest first.")
        listing.add_argument("--team", help="Only this team's jobs (slug).")
        listing.add_argument("--state", action="append", choices=[s.value for s in JobState], help="Repeatable.")
        listing.add_argument("--limit", type=int, default=50, help="At most this many (default 50; 0: all).")
        listing.add_argument("--json", action="store_true", help="Print the jobs as a JSON list.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "submit":
            self._submit(options)
        else:
            self._list(options)

    def _submit(self, options: dict[str, Any]) -> None:
        path = Path(options["spec"])
        try:
            spec = read_spec_file(path, expected="a job object (the job keys of spec/scenario.md)")
        except SpecFileError as exc:
            self.stderr.write(str(exc))
            raise CommandError(f"cannot read {path}; nothing was submitted.") from None
        actor = None
        if options["username"]:
            actor = get_user_model().objects.filter(username=options["username"]).first()
            if actor is None:
                raise CommandError(f"no user {options['username']!r}")
        try:
            job = job_submit(team=options["team"], spec=spec, actor=actor, source=str(path))
        except JobSpecInvalid as exc:
            for error in exc.errors:
                self.stderr.write(error)
            raise CommandError(f"{len(exc.errors)} error(s) in {path}; nothing was submitted.") from exc
        except JobsError as exc:
            raise CommandError(str(exc)) from exc
        except (ValidationError, IntegrityError, DataError) as exc:
            # Validation should have caught it; say so without a traceback, and only the error's first line:
            # PostgreSQL's DETAIL repeats the whole row, the job's env (perhaps secrets) included.
            for problem in _database_problems(exc):
                self.stderr.write(f"{path}: {problem}")
            raise CommandError(f"the database refused the job in {path}; nothing was submitted.") from None
        if options["json"]:
            self.stdout.write(json.dumps(job_json(job), indent=2))
        else:
            self.stdout.write(f"submitted job {job.pk} ({job.name}) for team {job.team.slug}: {job.request_display}")

    def _list(self, options: dict[str, Any]) -> None:
        jobs = job_list_for_operator(team=options["team"], states=options["state"])
        if options["limit"]:
            jobs = jobs[: options["limit"]]
        rows = [job_json(job) for job in jobs]
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        header = ("ID", "TEAM", "NAME", "REQUEST", "PRIORITY", "STATE", "QUEUE", "REASON")
        table = [header] + [
            (
                str(r["id"]),
                r["team"],
                r["name"][:30],
                r["request"],
                r["priority"],
                r["state"],
                str(r["queue_position"] or ""),
                (r["state_reason"] or "")[:60],
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _database_problems(exc: ValidationError | IntegrityError | DataError) -> list[str]:
    """What the database (or a model validator) refused, one line each, without the row's values."""
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return [f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()]
        return [" ".join(exc.messages)]
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return [f"the database refused the job: {first_line}"]


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "team": job.team.slug,
        "project": job.project.code if job.project is not None else None,
        "name": job.name,
        "kind": job.kind,
        "request": job.request_display,
        "replicas": job.replicas,
        "priority": job.priority,
        "rank": job.rank,
        "state": job.state,
        "state_reason": job.state_reason,
        "queue_position": job.queue_position,
        "eta_at": job.eta_at.isoformat() if job.eta_at else None,
        "submitted_at": job.submitted_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }
