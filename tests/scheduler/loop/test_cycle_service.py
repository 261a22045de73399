"""The cycle service on the simulated fleet: record then apply, completion, crash repair, idempotent apply,
fencing, lost nodes, refused binds, retries."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_cancel, job_submit
from scheduler.bridge.policy import policy_current
from scheduler.bridge.snapshot import build
from scheduler.core import plan_cycle
from scheduler.errors import FencingError, GatewayConflict, GatewayRetryable
from scheduler.loop.apply import Retry, apply_ops
from scheduler.loop.cycle import cycle_run
from scheduler.loop.record import record_plan
from scheduler.models import SchedulerFence, SimulatedPod
from tests.scheduler.loop_helpers import fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db

NO_WAIT = Retry(attempts=3, backoff_s=0.0, sleep=lambda _s: None)


@pytest.fixture
def team(db):
    fleet_seed()
    return team_seed()


def _submit(team, clock, **spec):
    return job_submit(team=team, spec={"kind": "training", **spec}, actor=None, now=clock.now)


class Crashing:
    """Wraps a gateway; ``job_bind`` dies like a worker killed mid-apply (not a GatewayError)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def job_bind(self, *, request):
        raise RuntimeError("worker lost between record and apply")

    def jobs_bind(self, *, requests):
        """A cycle's binds in one call (the loop calls it on a gateway that has it, as the fleet does): each through
        this double's ``job_bind``, a refusal returned, any other error raised for the whole call."""
        refused = {}
        for request in requests:
            try:
                self.job_bind(request=request)
            except GatewayConflict as exc:
                refused[request.job] = str(exc)
        return refused


class Flaky(Crashing):
    """``job_bind`` fails with a transient error ``failures`` times, then works."""

    def __init__(self, inner, failures):
        super().__init__(inner)
        self.failures = failures
        self.calls = 0

    def job_bind(self, *, request):
        self.calls += 1
        if self.calls <= self.failures:
            raise GatewayRetryable("HTTP 503 from the API server")
        return self.inner.job_bind(request=request)


def test_a_job_is_placed_then_completes(team, clock):
    gateway = fleet(clock)
    job = _submit(team, clock, gpus=4, duration_s=600)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "running" and job.queue_position is None
    assert report.applied == [f"bind {job.pk}"]
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 4
    assert SimulatedPod.objects.filter(job=job).count() == 1
    clock.advance(10)  # 600 virtual seconds
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "completed" and report.repairs["completed"] == [str(job.pk)]
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    assert not SimulatedPod.objects.exists()  # cleaned up
    assert list(job.events.values_list("type", flat=True)) == ["submitted", "bound", "completed"]


def test_pending_jobs_get_a_queue_position_and_a_reason(team, clock):
    gateway = fleet(clock)
    first = _submit(team, clock, gpus=8, tier="reserved-only", duration_s=600)  # one reserved 8-GPU box
    second = _submit(team, clock, gpus=8, tier="reserved-only", duration_s=600)
    third = _submit(team, clock, gpus=8, tier="reserved-only", duration_s=600)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    first.refresh_from_db(), second.refresh_from_db(), third.refresh_from_db()
    assert first.state == "running"
    assert (second.queue_position, second.team_queue_position) == (1, 1)
    assert (third.queue_position, third.team_queue_position) == (2, 2)
    assert "waiting for 8 A100 GPUs" in second.state_reason and second.eta_at is not None and second.eta_at > clock.now


def test_a_crash_between_record_and_apply_is_repaired_by_the_next_cycle(team, clock):
    gateway = fleet(clock)
    job = _submit(team, clock, gpus=2, replicas=2, duration_s=6000)
    with pytest.raises(RuntimeError, match="worker lost"):
        cycle_run(gateway=Crashing(gateway), retry=NO_WAIT)
    job.refresh_from_db()
    recorded = sorted(Allocation.objects.filter(job=job).values_list("pk", "node__name", "gpu_index"))
    assert job.state == "running" and len(recorded) == 4  # the decision was recorded...
    assert not SimulatedPod.objects.exists()  # ...but never applied

    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["rebound"] == [str(job.pk)]
    assert sorted(Allocation.objects.filter(job=job).values_list("pk", "node__name", "gpu_index")) == recorded
    pods = SimulatedPod.objects.filter(job=job).order_by("replica")
    assert [p.replica for p in pods] == [0, 1]
    assert {(p.node.name, g) for p in pods for g, _m, _s in p.devices} == {(n, g) for _pk, n, g in recorded}
    assert job.events.filter(type="bound").count() == 1  # bound once, applied twice: nothing bound twice

    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["rebound"] == [] and report.applied == []


def test_applying_the_same_plan_twice_changes_nothing(team, clock):
    gateway = fleet(clock)
    for _ in range(3):
        _submit(team, clock, gpus=2, duration_s=6000)
    _submit(team, clock, mig_profile="3g.40gb", kind="inference", duration_s=6000)
    policy = policy_current()
    observation = gateway.observe()
    now = observation.observed_at
    built = build(observation, policy, now)
    plan = plan_cycle(built.snapshot, policy, now)
    assert len(plan.binds) == 4
    recorded = record_plan(plan, observation, at=clock.now, fence_token=None)
    apply_ops(gateway, recorded.ops, grace_s=0, retry=NO_WAIT)
    pods = sorted(SimulatedPod.objects.values_list("pk", "job_id", "replica", "node_id", "devices", "bound_at"))
    allocations = sorted(Allocation.objects.values_list("pk", "job_id", "node_id", "gpu_index", "mig_start"))
    # The same plan again: recording skips jobs that are no longer pending, applying re-binds idempotently.
    again = record_plan(plan, observation, at=clock.now, fence_token=None)
    assert again.decisions["binds"] == [] and again.ops == []
    result = apply_ops(gateway, recorded.ops, grace_s=0, retry=NO_WAIT)
    assert result.failed == [] and result.refused == []
    assert sorted(SimulatedPod.objects.values_list("pk", "job_id", "replica", "node_id", "devices", "bound_at")) == pods
    assert sorted(Allocation.objects.values_list("pk", "job_id", "node_id", "gpu_index", "mig_start")) == allocations


def test_a_stale_fencing_token_writes_nothing(team, clock):
    gateway = fleet(clock)
    job = _submit(team, clock, gpus=1, duration_s=600)
    SchedulerFence.objects.create(name="cycle", token=10)
    with pytest.raises(FencingError, match="older than 10"):
        cycle_run(gateway=gateway, fence_token=9, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "pending" and not Allocation.objects.exists() and not SimulatedPod.objects.exists()
    cycle_run(gateway=gateway, fence_token=11, retry=NO_WAIT)
    assert SchedulerFence.objects.get(name="cycle").token == 11
    job.refresh_from_db()
    assert job.state == "running"


def test_jobs_on_an_interrupted_spot_node_are_requeued_and_placed_again(team, clock):
    gateway = fleet(clock, interruptions_per_node_hour=0.0, notice_s=120.0, replace_after_s=6000.0)
    job = _submit(team, clock, gpus=2, tier="spot-ok", gpu_model="A100-PCIE-40GB", duration_s=60_000)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    assert SimulatedPod.objects.get(job=job).node.name == "pcie-spot-1"
    # The cloud reclaims it: notice now, gone after 2 virtual minutes.
    state = SimulatedPod.objects.get(job=job).node.simulated_state
    state.notice_at = clock.now
    state.gone_at = clock.now + timedelta(seconds=2)
    state.back_at = state.gone_at + timedelta(seconds=100)
    state.save()
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    # The node takes no new work; the job is drained (without checkpoints it has nothing to save and stops).
    assert report.decisions["binds"] == [] and report.repairs["drained"] == [str(job.pk)]
    clock.advance(3)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert report.repairs["requeued"] == [str(job.pk)] and report.repairs["lost"] == []
    # Requeued, not rejected: the interrupted node is still known capacity, closed until it returns.
    assert job.state == "pending" and "no node that could run it is ready" in job.state_reason
    assert job.events.filter(type="preempted").get().details == {"reason": "spot-reclaim", "by": None}
    assert job.events.filter(type="requeued").exists()
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    clock.advance(100)  # the replacement joins
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job.refresh_from_db()
    assert job.state == "running" and SimulatedPod.objects.get(job=job).node.name == "pcie-spot-1"
    assert job.events.filter(type="bound").count() == 2


def test_a_bind_the_cluster_refuses_is_requeued(team, clock):
    gateway = fleet(clock)
    job = _submit(team, clock, gpus=1, duration_s=600)

    class Refusing(Crashing):
        def job_bind(self, *, request):
            raise GatewayConflict("node a100-res-1 was cordoned a moment ago")

    report = cycle_run(gateway=Refusing(gateway), retry=NO_WAIT)
    job.refresh_from_db()
    assert report.requeued_after_refusal == [str(job.pk)]
    assert job.state == "pending" and "cordoned a moment ago" in job.state_reason
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_transient_errors_are_retried_with_backoff(team, clock):
    sleeps: list[float] = []
    retry = Retry(attempts=3, backoff_s=0.5, sleep=sleeps.append)
    flaky = Flaky(fleet(clock), failures=2)
    job = _submit(team, clock, gpus=1, duration_s=600)
    report = cycle_run(gateway=flaky, retry=retry)
    assert report.applied == [f"bind {job.pk}"] and sleeps == [0.5, 1.0]
    assert SimulatedPod.objects.filter(job=job).count() == 1


def test_retries_exhausted_leave_the_repair_to_the_next_cycle(team, clock):
    gateway = fleet(clock)
    job = _submit(team, clock, gpus=1, duration_s=600)
    report = cycle_run(gateway=Flaky(gateway, failures=5), retry=NO_WAIT)
    assert report.failed and "HTTP 503" in report.failed[0]
    assert Job.objects.get(pk=job.pk).state == "running" and not SimulatedPod.objects.exists()
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["rebound"] == [str(job.pk)] and SimulatedPod.objects.filter(job=job).exists()


def test_a_cancelled_running_job_is_stopped_on_the_cluster(team, clock):
    gateway = fleet(clock)
    job = _submit(team, clock, gpus=1, duration_s=6000)
    cycle_run(gateway=gateway, retry=NO_WAIT)
    job_cancel(job=job, actor=None, now=clock.now)
    assert SimulatedPod.objects.filter(job=job).exists()  # recorded, not applied yet
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    assert report.repairs["cleaned"] == [str(job.pk)] and f"evict {job.pk} (cancelled)" in report.applied
    assert not SimulatedPod.objects.exists()


def test_priority_preemption_is_recorded_then_applied(team, clock):
    gateway = fleet(clock)
    low = [_submit(team, clock, gpus=8, priority="low", preemptible=True, duration_s=60_000)]
    low.append(_submit(team, clock, gpus=4, priority="low", preemptible=True, tier="spot-ok", duration_s=60_000))
    cycle_run(gateway=gateway, retry=NO_WAIT)
    clock.advance(600)  # past the minimum runtime that protects fresh work
    urgent = _submit(team, clock, gpus=8, priority="high", duration_s=600)
    report = cycle_run(gateway=gateway, retry=NO_WAIT)
    evicted = {e["job"] for e in report.decisions["evictions"]}
    assert evicted and evicted <= {str(j.pk) for j in low}
    urgent.refresh_from_db()
    assert urgent.state == "running"
    for job_id in evicted:
        job = Job.objects.get(pk=int(job_id))
        assert job.state == "pending" and not SimulatedPod.objects.filter(job=job).exists()
        event = JobEvent.objects.filter(job=job, type="preempted").get()
        # With the preempting job's team, kind and priority: the words the victim's page shows
        # (jobs.selectors.preemptions).
        assert event.details == {
            "reason": "priority",
            "by": str(urgent.pk),
            "by_team": team.slug,
            "by_team_name": team.name,
            "by_kind": urgent.kind,
            "by_priority": "high",
        }


def test_a_planned_reconfiguration_reaches_the_fleet(team, clock):
    gateway = fleet(clock, mig_reconfigure_s=60.0)
    team.quotas.update(guaranteed_gpus=16, burst_gpus=24)  # within its guarantee: no borrowing rules involved
    # Demand the balanced GPU cannot serve: a 4g.40gb instance, while the whole-GPU node is full. (Not 7g.80gb:
    # that profile is the whole GPU, and the idle MIG-off GPU beside the balanced one serves it with no change.)
    _submit(team, clock, gpus=8, duration_s=60_000)
    job = _submit(team, clock, mig_profile="4g.40gb", kind="inference", duration_s=600)
    for _ in range(6):
        report = cycle_run(gateway=gateway, retry=NO_WAIT)
        if report.decisions["reconfigurations"]:
            break
        clock.advance(10)
    assert report.decisions["reconfigurations"], Job.objects.get(pk=job.pk).state_reason
    assert any(a.startswith("mig mig-od-1") for a in report.applied)
    clock.advance(2)
    for _ in range(3):
        cycle_run(gateway=gateway, retry=NO_WAIT)
        clock.advance(10)
    job.refresh_from_db()
    assert job.state in ("running", "completed")


def test_policy_from_settings_rejects_unknown_keys(settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "cycle_secs": 5}
    with pytest.raises(ValueError, match="cycle_secs"):
        policy_current()
    settings.SCHEDULER = {k: v for k, v in settings.SCHEDULER.items() if k != "cycle_secs"}
    assert replace(policy_current(), cycle_s=10.0).cycle_s == 10.0


def test_the_cycle_plans_with_the_cyclic_collector_paused_and_restores_it(team, clock, monkeypatch):
    """The engine leaves the collector alone; the loop pauses it around plan_cycle (scheduler.gcpause)."""
    import gc

    import scheduler.loop.cycle as loop_cycle

    seen = []

    def planning(*args, **kwargs):
        seen.append(gc.isenabled())
        return plan_cycle(*args, **kwargs)

    monkeypatch.setattr(loop_cycle, "plan_cycle", planning)
    _submit(team, clock, gpus=1, duration_s=600)
    assert gc.isenabled()
    cycle_run(gateway=fleet(clock), retry=NO_WAIT)
    assert seen == [False] and gc.isenabled()
