"""``manage.py teams apply FILE [--prune] [--dry-run] [--json] [--actor USERNAME]``: keep teams, quotas and
members in git.

A thin edge: parse arguments, load and validate the file (``teams.orgfile``), call ``teams.services.org_apply``
and render its result. Every error goes to stderr, one per line, prefixed with the file path, and the command
exits non-zero. Reading is ``scheduler.specs.files``' (through ``teams.orgload``), so an unreadable or
hostile file (not UTF-8, binary, nested too deep, a YAML alias bomb or ``!!python`` tag) is one line too.
Every change it writes is in the audit trail, naming ``--actor`` (docs/audit.md).
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DataError

from audit.context import acting
from teams.errors import OrgApplyError, OrgFileError, OrgValidationError
from teams.orgfile import load_org_file, validate_org
from teams.services import ACTIONS, KINDS, OrgApplyResult, org_apply


class Command(BaseCommand):
    help = "Manage teams declaratively. 'apply FILE' makes the database match an organisation file (spec/org.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        # Django's add_subparsers passes called_from_command_line on, so bad arguments under call_command
        # raise CommandError instead of exiting the test process.
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="{apply}")
        apply: ArgumentParser = subcommands.add_parser(
            "apply",
            help="Create or update teams, projects, quotas, members and org roles from a JSON or YAML file.",
        )
        apply.add_argument("file", help="Organisation file (.json, .yaml or .yml).")
        apply.add_argument("--prune", action="store_true", help="Also delete what the file no longer lists.")
        apply.add_argument("--dry-run", action="store_true", help="Show what would change; write nothing.")
        apply.add_argument("--json", action="store_true", help="Print the result as JSON.")
        apply.add_argument(
            "--actor",
            metavar="USERNAME",
            default="",
            help="The person the audit trail names for these changes (default: none, recorded as 'teams apply').",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["subcommand"] == "apply":
            actor = self._actor(options["actor"])
            with acting(actor=actor, via="teams apply"):
                self._apply(
                    path=options["file"], prune=options["prune"], dry_run=options["dry_run"], as_json=options["json"]
                )

    def _actor(self, username: str) -> User | None:
        if not username:
            return None
        actor = User.objects.filter(username=username).first()
        if actor is None:
            raise CommandError(f"--actor {username!r}: no such user; give the username of an existing account.")
        return actor

    def _fail(self, path: str, errors: list[str], summary: str) -> CommandError:
        for error in errors:
            self.stderr.write(f"{path}: {error}")
        return CommandError(summary)

    def _apply(self, *, path: str, prune: bool, dry_run: bool, as_json: bool) -> None:
        try:
            spec = validate_org(load_org_file(path))
            result = org_apply(spec=spec, prune=prune, dry_run=dry_run)
        except OrgFileError as exc:
            self.stderr.write(str(exc))  # already "path:line:column: message"
            raise CommandError(f"cannot read {path}; nothing was written.") from exc
        except OrgValidationError as exc:
            raise self._fail(path, exc.errors, f"{len(exc.errors)} error(s) in {path}; nothing was written.") from exc
        except OrgApplyError as exc:
            raise self._fail(path, exc.errors, f"cannot apply {path}; nothing was written.") from exc
        except (DataError, ValidationError) as exc:
            # Validation mirrors the columns, so this means it missed something: one line, no traceback.
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            errors = [f"the database refused the change: {first_line}"]
            raise self._fail(path, errors, f"cannot apply {path}; nothing was written.") from None

        if as_json:
            self.stdout.write(json.dumps({"file": path, **result.as_dict()}, indent=2, ensure_ascii=False))
        else:
            self.stdout.write(self._summary(path, result))

    def _summary(self, path: str, result: OrgApplyResult) -> str:
        if not result.changed:
            return f"No changes: the database already matches {path}."
        heading = f"Dry run of {path}, nothing was written; would apply:" if result.dry_run else f"Applied {path}:"
        lines = [heading]
        for kind in KINDS:
            for action in ACTIONS:
                for change in (c for c in result.changes if c.kind == kind and c.action == action):
                    details = f" ({'; '.join(change.details)})" if change.details else ""
                    lines.append(f"  {kind.replace('_', ' ')} {action}: {change.key}{details}")
        totals = {action: sum(n.get(action, 0) for n in result.counts().values()) for action in ACTIONS}
        lines.append(", ".join(f"{n} {action}" for action, n in totals.items()) + ".")
        return "\n".join(lines)
