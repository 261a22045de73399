"""``manage.py demo seed``: fill the database with the demo organisation and fleet, and say how to sign in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The project's Celery app (portal/celery.py, created when Django loads the portal's settings), taken as Celery's
# current app so that the demo, an app like the others, does not import the composition root.
from celery import current_app as celery_app
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo.seed import DEMO_PASSWORD, DemoSeedResult, demo_seed

DEMO_SETTINGS = "portal.demo_settings"

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
        seed.add_argument(
            "--no-history",
            action="store_true",
            help="Skip the month of past work in the ledger (the org, fleet and prices only; seconds faster).",
        )

        run = actions.add_parser(
            "run",
            help="Run the web server, a Celery worker and beat on the simulated fleet (no server needed); "
            "Ctrl-C stops them all.",
        )
        run.add_argument("--host", default="127.0.0.1")
        run.add_argument("--port", type=int, default=8000)
        run.add_argument("--duration-s", type=float, default=0.0, help="Stop by itself after this long (0: never).")
        actions.add_parser("worker", help="A Celery worker (what `demo run` starts; use with --settings).")
        actions.add_parser("beat", help="Celery beat (what `demo run` starts; use with --settings).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "seed":
            self._seed(
                url=options["url"],
                allow_without_debug=options["allow_without_debug"],
                history=not options["no_history"],
            )
        elif options["action"] == "run":
            if not settings.DEBUG:
                raise CommandError("`demo run` is for a laptop: run it with DEBUG=1 (as `make demo` does).")
            supervisor = DemoSupervisor(host=options["host"], port=options["port"], out=self.stdout)
            if supervisor.run(duration_s=options["duration_s"]):
                raise CommandError(supervisor.failure or "a demo process failed")
        elif options["action"] == "worker":
            celery_app.worker_main(["worker", "--pool=solo", "--loglevel=INFO", "--hostname=demo-worker@%h"])
        else:
            celery_app.start(["beat", "--loglevel=INFO", f"--schedule={settings.CELERY_BEAT_SCHEDULE_FILENAME}"])

    def _seed(self, *, url: str, allow_without_debug: bool, history: bool) -> None:
        # A superuser called admin with password "demo" on a real deployment is an open door; DEBUG off is the
        # best signal we have that this database is not a laptop's.
        if not settings.DEBUG and not allow_without_debug:
            raise CommandError(
                "refusing to seed DEMO accounts with DEBUG off: this looks like a production database. "
                "Run with DEBUG=1 (as `make demo` does) for a local demo."
            )
        result = demo_seed(history=history)
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
    if result.history_entries:
        lines.append(
            f"Billing: a month of past work closed into {result.history_entries} ledger entries "
            "(Billing shows last month as final)."
        )
    lines.append(f"Seeded in {result.seconds:.1f} s.")
    return "\n".join(lines)


class DemoSupervisor:
    """Starts the demo's processes and stops every one of them, whatever happens.

    The processes share the embedded setup of ``portal/demo_settings.py``: SQLite, the simulated fleet, kombu's
    **filesystem** broker under ``var/celery/`` (no Redis server) and the file lock for single flight. Each child
    runs in its own session, so a Ctrl-C reaches only the supervisor, which then stops the children in order
    (SIGTERM, then SIGKILL after a grace period) instead of leaving strays behind.
    """

    GRACE_S = 10.0

    def __init__(self, *, host: str, port: int, out: Any) -> None:
        self.host, self.port, self.out = host, port, out
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.failure = ""
        self._stop = False

    def commands(self) -> list[tuple[str, list[str]]]:
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        demo = f"--settings={DEMO_SETTINGS}"
        return [
            ("web", [*manage, "runserver", "--noreload", demo, f"{self.host}:{self.port}"]),
            ("worker", [*manage, "demo", demo, "worker"]),  # --settings before the action: subparsers
            ("beat", [*manage, "demo", demo, "beat"]),
        ]

    def run(self, *, duration_s: float = 0.0) -> int:
        var = Path(settings.VAR_DIR)
        for folder in (var / "celery" / "queue", var / "celery" / "processed"):
            folder.mkdir(parents=True, exist_ok=True)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        deadline = time.monotonic() + duration_s if duration_s > 0 else None
        try:
            for name, command in self.commands():
                # The children inherit this environment (DEBUG=1, DATABASE_URL...); --settings does the rest.
                child = subprocess.Popen(command, cwd=settings.BASE_DIR, start_new_session=True)
                self.children.append((name, child))
                self.out.write(f"demo: started {name} (pid {child.pid})")
            self.out.write(f"demo: open http://{self.host}:{self.port}/ — Ctrl-C stops everything")
            while not self._stop and (deadline is None or time.monotonic() < deadline):
                for name, child in self.children:
                    if child.poll() is not None:
                        self.failure = f"demo: {name} exited with status {child.returncode}; stopping the others"
                        self._stop = True
                time.sleep(0.5)
        finally:
            self.stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.failure:
            self.out.write(self.failure)
            return 1
        return 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop = True

    def stop_all(self) -> None:
        for name, child in reversed(self.children):
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
                self.out.write(f"demo: stopping {name} (pid {child.pid})")
        deadline = time.monotonic() + self.GRACE_S
        for name, child in self.children:
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                self.out.write(f"demo: killed {name} (pid {child.pid}): it ignored SIGTERM")
