"""The migration that made production a grant (teams 0003) stops no live service: a team with production work
pending or running at that moment keeps production for those kinds; every other team starts at ``high``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("teams", "0002_team_checkpoint_claim")]
AFTER = [("teams", "0003_team_priority_grant")]


@pytest.mark.django_db(transaction=True)
def test_teams_with_live_production_work_keep_it_for_its_kinds() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        _check_the_grant(executor)
    finally:  # the database is shared with the transactional tests that follow: leave it at the latest state
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def _check_the_grant(executor: MigrationExecutor) -> None:
    # Every other app as it is now (jobs' rows are needed), teams as before the grant.
    others = [node for node in executor.loader.graph.leaf_nodes() if node[0] != "teams"]
    old = executor.loader.project_state([*others, *BEFORE]).apps
    team, job = old.get_model("teams", "Team"), old.get_model("jobs", "Job")
    now = timezone.now()
    serving = team.objects.create(name="Serving", slug="serving", namespace="team-serving")
    mixed = team.objects.create(name="Mixed", slug="mixed", namespace="team-mixed")
    ended = team.objects.create(name="Ended", slug="ended", namespace="team-ended")
    plain = team.objects.create(name="Plain", slug="plain", namespace="team-plain")
    live = {"submitted_at": now, "started_at": now, "state": "running", "gpus": 1, "priority": "production"}
    job.objects.create(team=serving, name="chat", kind="inference", **live)
    job.objects.create(team=mixed, name="train", kind="training", **{**live, "state": "pending", "started_at": None})
    job.objects.create(team=ended, name="old", kind="inference", **{**live, "state": "completed", "finished_at": now})
    job.objects.create(team=plain, name="work", kind="training", **{**live, "priority": "high"})

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("teams", "Team")
    grants = {t.slug: (t.max_priority, t.production_kinds) for t in new.objects.all()}
    assert grants == {
        "serving": ("production", ["inference"]),
        "mixed": ("production", ["training", "inference"]),
        "ended": ("high", ["inference"]),
        "plain": ("high", ["inference"]),
    }
