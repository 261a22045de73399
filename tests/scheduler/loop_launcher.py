"""Run a management command with ``CONN_HEALTH_CHECKS`` forced on or off, for the outage tests.

Usage: python -m tests.scheduler.loop_launcher on|off|settings COMMAND [ARGS...]

The database settings come from the environment as usual (``DATABASE_URL``); ``on``/``off`` overrides only
whether Django checks a connection before the first query of a unit of work, so that a test can prove the
loop survives a dropped connection both when the check catches it and when the first query meets it.
"""

from __future__ import annotations

import os
import sys

import django


def main() -> None:
    health_checks, command = sys.argv[1], sys.argv[2:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.core.management import execute_from_command_line
    from django.db import connections

    if health_checks != "settings":
        # Read by the connection when it connects, so setting it before the first query is enough.
        connections["default"].settings_dict["CONN_HEALTH_CHECKS"] = health_checks == "on"
    execute_from_command_line(["manage.py", *command])


if __name__ == "__main__":
    main()
