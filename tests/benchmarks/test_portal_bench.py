"""``manage.py bench portal`` measures the real pages and leaves the database as it found it."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from benchmarks.portal_bench import (
    DASHBOARD_CLAIM,
    PREVIEW_CLAIM,
    PREVIEW_COLD,
    PREVIEW_TRAINING,
    QUEUE_CLAIM,
    TARGETS_MS,
    Timing,
    claims_of,
)
from jobs.models import Job
from scheduler.models import Node, UtilizationSample
from teams.models import Team
from tests.untraced import untraced

pytestmark = pytest.mark.django_db


@untraced
def test_bench_portal_prints_figures_and_rolls_back() -> None:
    out = StringIO()
    call_command("bench", "portal", "--pending", "40", "--repeat", "1", "--json", stdout=out)
    payload = json.loads(out.getvalue())
    assert payload["command"] == "python manage.py bench portal --pending 40 --repeat 1"
    labels = {t["label"]: t for t in payload["timings"]}
    assert {"queue page", "queue API", "dashboard page", "cluster page", "metrics scrape"} <= set(labels)
    previews = {"submit preview API, 1-GPU training", "submit preview API, 18 GiB inference"}
    assert previews | {"submit preview API, no cycle state"} <= set(labels)
    assert all(labels[label]["target_ms"] == 300.0 for label in previews)
    assert all(t["median_ms"] > 0 and t["queries"] > 0 for t in payload["timings"])
    assert [c["claim"][:10] for c in payload["claims"]] == ["queue page", "dashboard ", "submit pre"]
    assert not Job.objects.exists() and not Team.objects.exists() and not Node.objects.exists()
    assert not UtilizationSample.objects.exists()


@untraced
def test_bench_portal_table_names_its_command() -> None:
    out = StringIO()
    call_command("bench", "portal", "--pending", "5", "--repeat", "1", stdout=out)
    assert "python manage.py bench portal --pending 5 --repeat 1" in out.getvalue().splitlines()[0]
    assert "queue API" in out.getvalue()


def _timing(label: str, p95_ms: float, claim: str | None) -> Timing:
    target = TARGETS_MS[claim] if claim is not None else None
    return Timing(label, "/", p95_ms, p95_ms, p95_ms, p95_ms, 1, target, claim)


def test_each_claim_judges_only_its_own_rows() -> None:
    # The queue and the preview share a 300 ms target: a slow preview must not fail the queue's claim.
    timings = [
        _timing("queue page", 80.0, QUEUE_CLAIM),
        _timing("queue API", 40.0, QUEUE_CLAIM),
        _timing("dashboard page", 200.0, DASHBOARD_CLAIM),
        _timing(PREVIEW_TRAINING, 345.0, PREVIEW_CLAIM),
        _timing(PREVIEW_COLD, 900.0, None),
    ]
    queue, dashboard, preview = claims_of(timings, 10_000)
    assert queue.reproduced and queue.measured == "queue page 80.0 ms, queue API 40.0 ms"
    assert dashboard.reproduced and dashboard.measured == "dashboard page 200.0 ms"
    assert not preview.reproduced and preview.measured == f"{PREVIEW_TRAINING} 345.0 ms"
