"""The snapshot's reads that a cycle makes for thousands of jobs (scheduler.bridge.snapshot): the same answers as
the plain forms they replace."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from scheduler.autoscaled import AutoscaledPool
from scheduler.bridge import snapshot
from scheduler.bridge.provisioning import census_offerings
from scheduler.bridge.snapshot import _member, build
from scheduler.core import NodeCensus, Policy
from scheduler.core.model.vocabulary import JobKind, JobTier, ModelMode, Priority
from scheduler.gateways.protocol import JobObservation, Observation
from tests.factories import AllocationFactory, GpuModelFactory, JobFactory, NodeFactory, TeamFactory


@pytest.mark.django_db
def test_the_resuming_jobs_of_a_query_are_those_of_its_ids() -> None:
    team = TeamFactory()
    lost, preempted, _waiting = (JobFactory(team=team, state="pending") for _ in range(3))
    now = timezone.now()
    running = JobFactory(team=team, state="running", submitted_at=now, started_at=now)
    for job, reason in ((lost, "node-lost"), (preempted, "priority"), (running, "spot-reclaim")):
        JobEvent.objects.create(job=job, type="preempted", at=timezone.now(), details={"reason": reason})
    pending = Job.objects.filter(state="pending")
    assert resuming_jobs(pending.values("pk")) == resuming_jobs(pending.values_list("pk", flat=True)) == {lost.pk}


@pytest.mark.parametrize("enum", [JobKind, Priority, JobTier, ModelMode])
def test_an_enum_member_by_value_is_the_enums_own(enum) -> None:
    for member in enum:
        assert _member(enum, member.value) is enum(member.value) is member
    for bad in ("bogus", ["a list"], None):
        with pytest.raises(ValueError) as ours:
            _member(enum, bad)
        with pytest.raises(ValueError) as theirs:
            enum(bad)
        assert str(ours.value) == str(theirs.value)  # the reason an unreadable row is rejected with


@pytest.mark.django_db
def test_an_unchanged_row_is_the_same_engine_job_in_the_next_build_and_a_changed_one_is_made_again(monkeypatch) -> None:
    team = TeamFactory()
    kept, changed = JobFactory(team=team, state="pending"), JobFactory(team=team, state="pending")
    JobFactory(team=team, state="pending", gpus=None, model={"params_b": 7, "dtype": "bf16"})  # not a key: made anew
    view = Observation(observed_at=timezone.now().timestamp(), nodes=(), jobs={})
    first = {job.id: job for job in build(view, Policy(), view.observed_at).snapshot.pending}
    Job.objects.filter(pk=changed.pk).update(rank=5)
    second = {job.id: job for job in build(view, Policy(), view.observed_at).snapshot.pending}
    assert second[str(kept.pk)] is first[str(kept.pk)]
    assert second[str(changed.pk)] is not first[str(changed.pk)] and second[str(changed.pk)].rank == 5
    monkeypatch.setattr(snapshot, "_engine_jobs", snapshot._EngineJobs())  # nothing kept: every job made from its row
    assert {job.id: job for job in build(view, Policy(), view.observed_at).snapshot.pending} == second


@pytest.mark.django_db
def test_a_job_bound_since_the_last_build_is_still_the_engine_job_of_its_pending_row(monkeypatch) -> None:
    team, node = TeamFactory(), NodeFactory()
    bound, waiting = JobFactory(team=team, state="pending"), JobFactory(team=team, state="pending")
    view = Observation(observed_at=timezone.now().timestamp(), nodes=(), jobs={})
    first = {job.id: job for job in build(view, Policy(), view.observed_at).snapshot.pending}
    now = timezone.now()
    Job.objects.filter(pk=bound.pk).update(state="running", started_at=now)  # what a bind changes of the row
    AllocationFactory(job=bound, node=node, gpu_index=0, started_at=now)
    second = build(view, Policy(), view.observed_at).snapshot
    (running,) = second.running
    assert running.job is first[str(bound.pk)] and running.started_at == now.timestamp()
    assert second.pending[0] is first[str(waiting.pk)]
    # The same snapshot as one built with nothing kept, from every row.
    monkeypatch.setattr(snapshot, "_engine_jobs", snapshot._EngineJobs())
    monkeypatch.setattr(snapshot, "_kept_running", snapshot._KeptRunning())
    cold = build(view, Policy(), view.observed_at).snapshot
    assert (cold.running, cold.pending) == (second.running, second.pending)


@pytest.mark.django_db
def test_an_unchanged_running_job_is_the_same_running_in_the_next_build_and_a_changed_one_is_made_again(
    monkeypatch,
) -> None:
    team, node = TeamFactory(), NodeFactory()
    now = timezone.now()
    submitted = now - timedelta(hours=1)
    jobs = [JobFactory(team=team, state="running", submitted_at=submitted, started_at=now) for _ in range(5)]
    kept, checkpointed, moved_gpu, moving, restarted = jobs
    for index, job in enumerate(jobs):
        AllocationFactory(job=job, node=node, gpu_index=index, started_at=now)
    AllocationFactory(job=moving, node=node, gpu_index=7, generation=1, started_at=now)  # a move under way
    # Not a key (its stored model is a JSON object): made anew every build, as a pending job's engine job is.
    unkeyed = JobFactory(
        team=team, state="running", submitted_at=submitted, started_at=now, gpus=None, model={"params_b": 7}
    )
    AllocationFactory(job=unkeyed, node=node, gpu_index=5, started_at=now)

    def view(checkpoints: dict[int, float]) -> Observation:
        observed = {
            str(pk): JobObservation(job=str(pk), namespace="ns", replicas=(), last_checkpoint_at=at)
            for pk, at in checkpoints.items()
        }
        return Observation(observed_at=now.timestamp(), nodes=(), jobs=observed)

    def running(observation: Observation) -> dict[str, object]:
        return {r.job.id: r for r in build(observation, Policy(), observation.observed_at).snapshot.running}

    first = running(view({checkpointed.pk: 100.0}))
    Allocation.objects.filter(job=moved_gpu).update(gpu_index=6)
    Allocation.objects.filter(job=moving, generation=0).update(ended_at=now)  # the move's old replicas released
    Job.objects.filter(pk=restarted.pk).update(started_at=now - timedelta(minutes=5))
    second = running(view({checkpointed.pk: 200.0}))
    assert second[str(kept.pk)] is first[str(kept.pk)]
    assert second[str(kept.pk)].job is first[str(kept.pk)].job
    for job in (checkpointed, moved_gpu, moving, restarted, unkeyed):
        assert second[str(job.pk)] is not first[str(job.pk)]
    assert second[str(checkpointed.pk)].last_checkpoint_at == 200.0
    assert second[str(moved_gpu.pk)].slots[0][0].gpu == 6
    assert second[str(moving.pk)].moving_from == () and first[str(moving.pk)].moving_from != ()
    # The same snapshot as one built with nothing kept, from every row.
    monkeypatch.setattr(snapshot, "_engine_jobs", snapshot._EngineJobs())
    monkeypatch.setattr(snapshot, "_kept_running", snapshot._KeptRunning())
    assert running(view({checkpointed.pk: 200.0})) == second
    # A third build keeps what the second kept (the kept job's engine job among it), and a fourth keeps the third's
    # entries themselves: nothing new is left behind for what did not change.
    third = running(view({checkpointed.pk: 200.0}))
    entries = dict(snapshot._kept_running._last), dict(snapshot._engine_jobs._last)
    assert running(view({checkpointed.pk: 200.0}))[str(kept.pk)] is third[str(kept.pk)]
    for before, after in zip(entries, (snapshot._kept_running._last, snapshot._engine_jobs._last), strict=True):
        assert before.keys() == after.keys() and all(after[key] is entry for key, entry in before.items())


@pytest.mark.django_db
def test_the_inventory_census_counted_by_the_database_is_the_census_of_the_inventory_nodes(
    django_assert_max_num_queries,
) -> None:
    h100 = GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100")
    for _ in range(3):
        NodeFactory()  # reserved A100s
    NodeFactory(tier="spot", fabric="efa")
    NodeFactory(gpu_model=h100, gpu_count=4, tier="on-demand", fabric="gpudirect-tcpx")
    NodeFactory(gpu_model=h100, gpu_count=4, tier="on-demand", state="gone")  # capacity that exists
    with django_assert_max_num_queries(2):  # the nodes counted, the autoscaled pools read
        counted = snapshot.inventory_census()
    assert counted == NodeCensus.of(snapshot.inventory_nodes())
    assert sum(count for _, count in counted.kinds) == 6


@pytest.mark.django_db
def test_the_inventory_census_counts_what_the_enabled_autoscaled_pools_can_still_add() -> None:
    """A job only a pool can serve is not one that could never run (a 2-node gang on a cluster of one node): the
    submit's census counts the pools as the cycle's screening does; a released node is capacity no more."""
    h100 = GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100")
    NodeFactory(gpu_model=h100, gpu_count=8, tier="on-demand", pool="h100-od")
    NodeFactory(gpu_model=h100, gpu_count=8, tier="on-demand", pool="h100-od", released_at=timezone.now())
    AutoscaledPool.objects.create(name="h100-od", gpu_model=h100, gpus_per_node=8, max_nodes=3, node_selector={})
    AutoscaledPool.objects.create(
        name="off", gpu_model=h100, gpus_per_node=8, max_nodes=5, node_selector={}, enabled=False
    )
    counted = snapshot.inventory_census()
    assert counted == NodeCensus.of(snapshot.inventory_nodes(), census_offerings())
    # The pool's one node and the two more it may add; the released node and the disabled pool count for nothing.
    assert sum(count for _, count in counted.kinds) == 3
