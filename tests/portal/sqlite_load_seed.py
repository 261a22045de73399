"""Seed a migrated database for the SQLite load test and print what the test drives, as one JSON line.

Usage: DATABASE_URL=sqlite:///… python -m tests.portal.sqlite_load_seed

A small fleet (tests/scheduler/loop_helpers.py), one team with a lead, a platform admin, members with API tokens,
and more short jobs than the fleet holds, so that the loop places, finishes and places again while the portal
reorders the ones still waiting.
"""

from __future__ import annotations

import json
import os

import django

PASSWORD = "load-test-password-1"  # a throwaway database's
TOKEN_USERS = 4
JOBS = 40


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from jobs.services import job_submit
    from scheduler.models import Node
    from teams.models import Membership, Quota
    from tests.scheduler.loop_helpers import fleet_seed, team_seed

    fleet_seed()
    team = team_seed("nlp", guaranteed=8, burst=12)
    lead = User.objects.create_user("load-lead", password=PASSWORD)
    Membership.objects.create(user=lead, team=team, role="lead")
    User.objects.create_superuser("load-admin", password=PASSWORD)
    tokens = []
    for n in range(TOKEN_USERS):
        member = User.objects.create_user(f"load-member-{n}", password=PASSWORD)
        Membership.objects.create(user=member, team=team, role="member")
        tokens.append(Token.objects.create(user=member).key)
    for n in range(JOBS):
        # 1-4 GPUs for 5-20 virtual minutes: at the simulated 60× they end within seconds, and the loop writes.
        spec = {"kind": "training", "gpus": 1 + n % 4, "duration_s": 300 * (1 + n % 4), "name": f"load-{n}"}
        job_submit(team=team, spec=spec, actor=lead)
    print(
        json.dumps(
            {
                "team": team.slug,
                "lead": lead.username,
                "admin": "load-admin",
                "password": PASSWORD,
                "tokens": tokens,
                "quota": Quota.objects.get(team=team).pk,
                "nodes": list(Node.objects.order_by("pk").values_list("pk", flat=True)),
            }
        )
    )


if __name__ == "__main__":
    main()
