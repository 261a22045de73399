"""``manage.py demo seed``: fill the database with the demo organisation and fleet, and say how to sign in."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.demo import DEMO_PASSWORD, DemoSeedResult, demo_seed

DEFAULT_URL = "http://127.0.0.1:8000/"
_RULE = "=" * 78


class Command(BaseCommand):
    help = "Demo data for a laptop: `demo seed` creates DEMO accounts (password 'demo'), teams and a GPU fleet."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        seed = actions.add_parser("seed", help="Create or refresh the demo org and fleet (idempotent).")
        seed.add_argument("--url", default=DEFAULT_URL, help=f"Where the portal will listen (default {DEFAULT_URL}).")
        seed.add_argument(
            "--allow-without-debug",
            action="store_true",
            help="Seed even with DEBUG off. The demo admin is a superuser with a known password: don't.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "seed":
            self._seed(url=options["url"], allow_without_debug=options["allow_without_debug"])

    def _seed(self, *, url: str, allow_without_debug: bool) -> None:
        # A superuser called admin with password "demo" on a real deployment is an open door; DEBUG off is the
        # best signal we have that this database is not a laptop's.
        if not settings.DEBUG and not allow_without_debug:
            raise CommandError(
                "refusing to seed DEMO accounts with DEBUG off: this looks like a production database. "
                "Run with DEBUG=1 (as `make demo` does) for a local demo."
            )
        result = demo_seed()
        self.stdout.write(_report(result, url=url))


def _report(result: DemoSeedResult, *, url: str) -> str:
    rows = [("USERNAME", "ROLE", "TEAM")]
    rows += [(login.username, login.role, login.team or "(all teams)") for login in result.logins]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    table = [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    created = (
        f"created {', '.join(result.users_created)}"
        if result.users_created
        else "all existed already; their passwords were left as they were"
    )
    lines = [
        _RULE,
        f'  DEMO ACCOUNTS: every login below signs in with the password "{DEMO_PASSWORD}"',
        "  (a password changed since the first seed is kept). For a local demo only:",
        "  never use these accounts, or this seed, in production.",
        _RULE,
        "",
        f"Open {url} and sign in as:",
        "",
        *table,
        "",
        f"Users: {created}.",
        f"Database now holds {result.teams} teams, {result.users} users, {result.nodes} nodes and "
        f"{result.gpus} GPUs ({result.mig_gpus} partitioned with MIG).",
    ]
    return "\n".join(lines)
