"""A spot interruption end to end on the simulated fleet (scheduler.loop.notice): notice → ``draining`` event →
eviction with a grace inside the notice → the job saves on SIGTERM and reports it → its pods stop → requeued whole
(spot-reclaim) at the head of its priority → bound elsewhere, resumed from the saved step → the job page tells it;
the ledger's lost work is the time since that checkpoint."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import LostWork
from billing.services import ledger_close_due
from jobs.models import Job
from jobs.services import job_submit
from scheduler.errors import GatewayRetryable
from scheduler.loop.apply import Retry
from scheduler.loop.cycle import cycle_run
from scheduler.loop.notice import MIN_GRACE_S
from scheduler.models import Node, SimulatedPod
from tests.factories import MembershipFactory, UserFactory
from tests.scheduler.loop_helpers import fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=1, backoff_s=0.0, sleep=lambda _s: None)
# Trains on any A100, prefers spot (the PCIe spot server of fleet_seed), saves every 600 virtual seconds.
SPOT_TRAINING = {
    "kind": "training",
    "gpus": 2,
    "gpu_model": "A100",
    "tier": "spot-ok",
    "preemptible": True,
    "checkpoint_interval_s": 600,
    "duration_s": 100_000,
}


@pytest.fixture
def nlp(db):
    fleet_seed()
    return team_seed()


def _events(job: Job) -> list[str]:
    """The job's timeline, in the job page's order."""
    return list(job.events.order_by("at", "id").values_list("type", flat=True))


def test_a_noticed_checkpointed_job_saves_is_requeued_first_and_resumes_elsewhere(nlp, clock, client, outsider):
    gateway = fleet(clock)  # 60 virtual seconds per real second; a save costs 30 virtual = 0.5 s
    job = job_submit(team=nlp, spec={**SPOT_TRAINING, "name": "pretrain"}, actor=None, now=clock.now)
    filler = job_submit(
        team=nlp,
        spec={"kind": "training", "gpus": 6, "gpu_model": "A100-SXM4-80GB", "duration_s": 100_000},
        actor=None,
        now=clock.now,
    )
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert SimulatedPod.objects.get(job=job).node.name == "pcie-spot-1"
    assert {p.node.name for p in SimulatedPod.objects.filter(job=filler)} == {"a100-res-1"}

    clock.advance(25)  # 1500 virtual seconds: saves at 600 and 1200 of work
    assert cycle_run(gateway=gateway, retry=NO_WAIT).repairs["checkpointed"] == [str(job.pk)]
    periodic = job.events.get(type="checkpointed")
    assert (periodic.details["step"], periodic.details["source"]) == (1200, "simulated")

    # The notice: 120 virtual seconds, i.e. 2 real seconds at 60× — shorter than the loop's margin, so the job
    # gets the minimum grace.
    gone_at = gateway.notice_give(node="pcie-spot-1")
    noticed_at = clock.now
    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    assert report.repairs["drained"] == [str(job.pk)] and report.repairs["requeued"] == []
    assert f"evict {job.pk} (spot-reclaim)" in report.applied
    draining = job.events.get(type="draining")
    assert draining.details == {
        "node": "pcie-spot-1",
        "source": "simulated-spot",
        "deadline": gone_at.isoformat(),
        "grace_s": MIN_GRACE_S,
    }
    assert Node.objects.get(name="pcie-spot-1").state == "draining"
    job.refresh_from_db()
    assert job.state == "running"  # while its pods stop
    saved = job.events.filter(type="checkpointed").latest("id")
    assert (saved.details["step"], saved.at) == (1500, noticed_at)  # saved on SIGTERM, reported by the job

    clock.advance(0.25)  # still saving: waited for, not requeued
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["stopping"] == [str(job.pk)] and report.applied == []
    assert job.events.filter(type="draining").count() == 1  # once per notice

    # Saved and gone. A job of the same team and priority that its lead ranked first asks for the same free GPUs.
    clock.advance(0.5)
    rival = job_submit(team=nlp, spec={**SPOT_TRAINING, "tier": "any", "name": "rival"}, actor=None, now=clock.now)
    Job.objects.filter(pk=rival.pk).update(rank=-5)
    requeued_at = clock.now
    report = cycle_run(gateway=gateway, retry=NO_WAIT)

    assert report.repairs["requeued"] == [str(job.pk)]
    assert [bind["job"] for bind in report.decisions["binds"]] == [str(job.pk)]  # resumes ahead of the rival
    job.refresh_from_db()
    assert job.state == "running" and Job.objects.get(pk=rival.pk).state == "pending"
    pod = SimulatedPod.objects.get(job=job)
    assert pod.node.name == "a100-res-1" and pod.work_start_s == 1500.0  # the new run starts from the save
    assert _events(job) == [
        "submitted",
        "bound",
        "checkpointed",
        "draining",
        "checkpointed",  # saved on the notice's SIGTERM
        "preempted",
        "requeued",
        "bound",
    ]
    assert job.events.get(type="preempted").details == {"reason": "spot-reclaim", "by": None}
    bound = job.events.filter(type="bound").latest("id")
    assert (bound.details["resumed"], bound.details["resumed_from_step"]) == (True, 1500)
    assert bound.details["nodes"] == ["a100-res-1"]

    # Lost work: the GPU time since the checkpoint saved on SIGTERM, on both GPUs of the spot run.
    ledger_close_due(now=clock.now + timedelta(hours=1))
    lost = list(LostWork.objects.filter(job=job))
    assert len(lost) == 2 and {row.reason for row in lost} == {"spot-reclaim"}
    for row in lost:
        assert (row.last_checkpoint_at, row.preempted_at) == (noticed_at, requeued_at)
        assert row.lost_s == Decimal((requeued_at - noticed_at).total_seconds()).quantize(row.lost_s)

    # The job page tells the story.
    member = MembershipFactory(team=nlp, role="member", user=UserFactory(username="nlp-member")).user
    client.force_login(member)
    body = client.get(reverse("jobs:detail", args=[job.pk])).content.decode()
    for line in (
        "Checkpointed (step 1500)",
        "Draining: spot notice on node pcie-spot-1",
        "Preempted (spot interruption)",
        "Resumed from step 1500 on node a100-res-1",
    ):
        assert line in body
    assert body.index("Checkpointed (step 1500)") < body.index("Preempted (spot interruption)") < body.index("Resumed")
    client.force_login(outsider)
    assert client.get(reverse("jobs:detail", args=[job.pk])).status_code == 404


def test_a_gang_is_drained_and_requeued_whole_and_every_replica_resumes_from_one_step(nlp, clock):
    gateway = fleet(clock)
    gang = job_submit(
        team=nlp, spec={**SPOT_TRAINING, "replicas": 2, "gpu_model": "A100-PCIE-40GB"}, actor=None, now=clock.now
    )
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert {p.node.name for p in SimulatedPod.objects.filter(job=gang)} == {"pcie-spot-1"}
    clock.advance(12)  # 720 virtual seconds: one periodic save at 600

    gateway.notice_give(node="pcie-spot-1", notice_s=1200)  # 20 real seconds of notice: room for a longer grace
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["drained"] == [str(gang.pk)]
    assert gang.events.get(type="draining").details["grace_s"] == pytest.approx(20 - 5)  # the notice less the margin
    observed = gateway.observe().jobs[str(gang.pk)]
    assert [r.phase for r in observed.replicas] == ["stopping", "stopping"]  # every replica at once

    clock.advance(1)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["requeued"] == [str(gang.pk)]
    assert gang.events.filter(type="preempted").count() == 1
    assert set(gang.allocations.exclude(ended_at=None).values_list("replica", "end_reason")) == {
        (0, "spot-reclaim"),
        (1, "spot-reclaim"),
    }
    # Nothing else can run it until the spot server's replacement joins: it waits, whole.
    gang.refresh_from_db()
    assert gang.state == "pending" and not SimulatedPod.objects.filter(job=gang).exists()
    clock.advance(20 + 15 + 1)  # the node goes, then its replacement joins 900 virtual seconds later
    cycle_run(gateway=gateway, retry=NO_WAIT)
    pods = list(SimulatedPod.objects.filter(job=gang).order_by("replica"))
    assert [(p.replica, p.work_start_s) for p in pods] == [(0, 720.0), (1, 720.0)]
    assert gang.events.filter(type="bound").latest("id").details["resumed_from_step"] == 720


class EvictFailsOnce:
    """Wraps the fleet: the first eviction fails like an API server that is down."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.failed = inner, inner.name, False

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def job_evict(self, **kwargs) -> None:
        if not self.failed:
            self.failed = True
            raise GatewayRetryable("HTTP 503 from the API server")
        self.inner.job_evict(**kwargs)


def test_an_eviction_that_did_not_apply_is_asked_again_and_nothing_is_requeued_meanwhile(nlp, clock):
    gateway = EvictFailsOnce(fleet(clock))
    job = job_submit(team=nlp, spec=SPOT_TRAINING, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    gateway.inner.notice_give(node="pcie-spot-1", notice_s=1200)
    first = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert first.repairs["drained"] == [str(job.pk)] and first.failed  # recorded, not applied
    clock.advance(1)
    second = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert second.repairs["drained"] == [str(job.pk)] and f"evict {job.pk} (spot-reclaim)" in second.applied
    assert job.events.filter(type="draining").count() == 1 and not job.events.filter(type="requeued").exists()


def test_a_node_that_goes_while_its_job_is_still_running_after_the_notice_ends_in_a_spot_interruption(nlp, clock):
    gateway = EvictFailsOnce(fleet(clock))
    job = job_submit(team=nlp, spec=SPOT_TRAINING, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    gateway.inner.notice_give(node="pcie-spot-1")  # 2 real seconds
    cycle_run(gateway=gateway, retry=NO_WAIT)  # drained, but the eviction failed: the job ran on
    clock.advance(5)  # the node went with it
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["requeued"] == [str(job.pk)] and report.repairs["lost"] == []
    assert job.events.get(type="preempted").details["reason"] == "spot-reclaim"


def test_a_node_that_goes_without_a_notice_the_loop_saw_is_a_lost_node(nlp, clock):
    gateway = fleet(clock)
    job = job_submit(team=nlp, spec=SPOT_TRAINING, actor=None, now=clock.now)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    gateway.notice_give(node="pcie-spot-1")
    clock.advance(5)  # gone before any cycle looked
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["lost"] == [str(job.pk)] and report.repairs["requeued"] == []
    assert not job.events.filter(type="draining").exists()
    assert job.events.get(type="preempted").details["reason"] == "node-lost"
