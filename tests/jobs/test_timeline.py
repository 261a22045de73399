"""The job page's timeline lines (jobs.selectors.timeline): a spot interruption reads as checkpointed (step N) →
preempted (spot interruption) → resumed from step N on node X, and every other event keeps its words."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import JobEvent
from jobs.selectors.timeline import event_text
from tests.factories import JobFactory


def _event(type_: str, **details: object) -> JobEvent:
    return JobEvent(type=type_, details=details)


@pytest.mark.parametrize(
    ("event", "text"),
    [
        (_event("checkpointed", step=1200, path="/c/step-000001200.ckpt"), "Checkpointed (step 1200)"),
        (_event("checkpointed"), "Checkpointed"),  # a backend that knew only the time
        (_event("draining", node="spot-1", source="spot-itn"), "Draining: spot notice on node spot-1"),
        (_event("draining", node="gpu-7", source="admin-drain"), "Draining: node gpu-7 drained by an admin"),
        (_event("preempted", reason="node-drain", by=None), "Preempted (node drain)"),
        (_event("preempted", reason="spot-reclaim", by=None), "Preempted (spot interruption)"),
        # Stored values older than their word (docs/glossary.md) read as the word.
        (_event("preempted", reason="repartition", by=None), "Preempted (reconfiguration)"),
        # The preempting job's team and kind, never its id: the victim's viewers may not open that job. An old
        # event stored the id alone (the job page looks the job up then: jobs.selectors.preemptions).
        (_event("preempted", reason="priority", by="42"), "Preempted by another job (priority)"),
        (
            _event(
                "preempted",
                reason="production",
                by="42",
                by_team_name="Vision",
                by_kind="inference",
                by_priority="production",
            ),
            "Preempted by a production inference job of team Vision (production)",
        ),
        (_event("requeued", message="spot notice on node spot-1"), "Requeued: spot notice on node spot-1"),
        (_event("bound", nodes=["a100-1", "a100-2"]), "Bound on node a100-1, a100-2"),
        (
            _event("bound", nodes=["a100-1"], resumed=True, resumed_from_step=1200),
            "Resumed from step 1200 on node a100-1",
        ),
        (
            _event("bound", nodes=["a100-1"], resumed=True, resumed_from_step=None),
            "Restarted from the beginning on node a100-1 (no checkpoint to resume from)",
        ),
        (_event("bound", placements=[[{"node": "old-1", "gpu": 0}]]), "Bound on node old-1"),  # before nodes
        (_event("priority_changed", old="normal", new="high"), "Priority changed: normal → high"),
        (_event("failed", reason="OOMKilled"), "Failed: OOMKilled"),
        (_event("submitted"), "Submitted"),
        # A node request's steps (scheduler.loop.provisioning_events), the autoscaler's words kept.
        (
            _event("node_request", state="pending", request="7", pool="h100-od", nodes=2, gpus_per_node=8),
            "On-demand nodes requested: 2 × 8 GPUs of pool h100-od (request 7)",
        ),
        (
            _event("node_request", state="provisioned", request="7", message="Capacity is found"),
            "On-demand nodes provisioned: Capacity is found (request 7)",
        ),
        (
            _event("node_request", state="fulfilled", request="7", node_names=["od-1", "od-2"]),
            "On-demand nodes joined the cluster: od-1, od-2 (request 7)",
        ),
        (
            _event("node_request", state="failed", request="7", message="CapacityIsNotFound: no H100 capacity"),
            "On-demand node request failed: CapacityIsNotFound: no H100 capacity (request 7)",
        ),
        (
            _event("node_request", state="timed-out", request="7", message="not provisioned within 30 min"),
            "On-demand node request timed out: not provisioned within 30 min (request 7)",
        ),
        (_event("node_request", state="withdrawn", request="7"), "On-demand node request withdrawn (request 7)"),
        (
            _event("node_request", state="released", request="7", node="od-1"),
            "On-demand node od-1 released, its cost stops (request 7)",
        ),
        (_event("node_request"), "On-demand node request changed (request ?)"),  # details lost: still a line
    ],
)
def test_each_event_reads_as_one_line(event: JobEvent, text: str) -> None:
    assert event_text(event) == text


@pytest.mark.django_db
def test_the_job_page_shows_the_lines_to_its_team_only(client, team, member, outsider) -> None:
    job = JobFactory(team=team, name="pretrain", state="pending")
    JobEvent.objects.create(job=job, type="checkpointed", at=job.submitted_at, details={"step": 7})
    JobEvent.objects.create(job=job, type="preempted", at=job.submitted_at, details={"reason": "spot-reclaim"})
    client.force_login(member)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    assert "Checkpointed (step 7)" in body and "Preempted (spot interruption)" in body
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404
