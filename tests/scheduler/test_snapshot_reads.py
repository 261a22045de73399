"""The snapshot's reads that a cycle makes for thousands of jobs (scheduler.bridge.snapshot): the same answers as
the plain forms they replace."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from scheduler.bridge import snapshot
from scheduler.bridge.snapshot import _member, build
from scheduler.core import NodeCensus, Policy
from scheduler.core.model.vocabulary import JobKind, JobTier, ModelMode, Priority
from scheduler.gateways.protocol import Observation
from tests.factories import GpuModelFactory, JobFactory, NodeFactory, TeamFactory


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
def test_the_inventory_census_counted_by_the_database_is_the_census_of_the_inventory_nodes(
    django_assert_max_num_queries,
) -> None:
    h100 = GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100")
    for _ in range(3):
        NodeFactory()  # reserved A100s
    NodeFactory(tier="spot", fabric="efa")
    NodeFactory(gpu_model=h100, gpu_count=4, tier="on-demand", fabric="gpudirect-tcpx")
    NodeFactory(gpu_model=h100, gpu_count=4, tier="on-demand", state="gone")  # capacity that exists
    with django_assert_max_num_queries(1):
        counted = snapshot.inventory_census()
    assert counted == NodeCensus.of(snapshot.inventory_nodes())
    assert sum(count for _, count in counted.kinds) == 6
