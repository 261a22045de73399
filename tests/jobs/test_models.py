"""Job, JobEvent and Allocation: the request rule, state timestamps, the append-only log, no double binding."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import Job
from tests.factories import AllocationFactory, JobEventFactory, JobFactory, NodeFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "request_fields",
    [
        {"gpus": 2},
        {"gpus": None, "mig_profile": "3g.40gb"},
        {"gpus": None, "memory_gib": Decimal("17.5")},
        {"gpus": None, "model": {"params_b": 7, "dtype": "bf16", "context": 4096, "batch": 8, "mode": "inference"}},
    ],
)
def test_each_single_way_of_stating_the_request_is_accepted(request_fields: dict[str, object]) -> None:
    job = JobFactory(**request_fields)
    job.full_clean()


@pytest.mark.parametrize(
    "request_fields",
    [
        {"gpus": None},
        {"gpus": 1, "mig_profile": "1g.10gb"},
        {"gpus": None, "mig_profile": "1g.10gb", "memory_gib": Decimal(5)},
        {"gpus": 2, "model": {"params_b": 7}},
    ],
)
def test_none_or_two_ways_of_stating_the_request_are_refused(request_fields: dict[str, object]) -> None:
    job = JobFactory.build(team=TeamFactory(), **request_fields)
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    assert "State the request in exactly one way" in str(caught.value)
    with pytest.raises(IntegrityError), transaction.atomic():
        job.save()


@pytest.mark.parametrize(
    "fields",
    [
        {"replicas": 0},
        {"gpus": 0},
        {"kind": "notebook"},
        {"priority": "urgent"},
        {"tier": "cheap"},
        {"state": "paused"},
        {"checkpoint_interval_s": 0},
        {"duration_s": 0},
    ],
)
def test_job_field_constraints_hold_in_the_database(fields: dict[str, object]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        JobFactory(**fields)


def test_running_job_needs_started_at_and_finished_job_needs_finished_at() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        JobFactory(state="running")
    with pytest.raises(IntegrityError), transaction.atomic():
        JobFactory(state="completed", started_at=timezone.now())
    now = timezone.now()
    JobFactory(state="cancelled", submitted_at=now, finished_at=now)  # cancelled while pending: never started


def test_job_cannot_start_before_it_was_submitted() -> None:
    now = timezone.now()
    with pytest.raises(IntegrityError), transaction.atomic():
        JobFactory(state="running", submitted_at=now, started_at=now - timedelta(seconds=1))


def test_request_display_speaks_plainly() -> None:
    assert JobFactory.build(gpus=4, replicas=2).request_display == "2 × 4 GPUs"
    assert JobFactory.build(gpus=None, mig_profile="1g.10gb").request_display == "1 × 1g.10gb"


def test_job_events_are_append_only() -> None:
    event = JobEventFactory()
    event.details = {"rewritten": True}
    with pytest.raises(PermissionError, match="append-only"):
        event.save()
    event.refresh_from_db()
    assert event.details == {}


def test_job_event_type_is_constrained() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        JobEventFactory(type="teleported")


def test_a_whole_gpu_is_never_bound_twice() -> None:
    node = NodeFactory()
    AllocationFactory(node=node, gpu_index=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        AllocationFactory(node=node, gpu_index=0)


def test_an_ended_allocation_frees_the_gpu() -> None:
    node = NodeFactory()
    first = AllocationFactory(node=node, gpu_index=0)
    first.ended_at = first.started_at + timedelta(hours=1)
    first.save()
    AllocationFactory(node=node, gpu_index=0)


def test_a_mig_instance_is_never_bound_twice_but_neighbours_are_free() -> None:
    node = NodeFactory()
    AllocationFactory(node=node, gpu_index=1, mig_profile="3g.40gb", mig_start=4)
    AllocationFactory(node=node, gpu_index=1, mig_profile="2g.20gb", mig_start=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        AllocationFactory(node=node, gpu_index=1, mig_profile="3g.40gb", mig_start=4)


@pytest.mark.parametrize(
    "fields",
    [
        {"mig_profile": "3g.40gb"},  # profile without a start
        {"mig_start": 4},  # start without a profile
        {"mig_profile": "1g.10gb", "mig_start": 8},
        {"tier": "free"},
        {"price_per_gpu_hour": Decimal("-1")},
    ],
)
def test_allocation_constraints(fields: dict[str, object]) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        AllocationFactory(**fields)


def test_allocation_cannot_end_before_it_starts() -> None:
    now = timezone.now()
    with pytest.raises(IntegrityError), transaction.atomic():
        AllocationFactory(started_at=now, ended_at=now - timedelta(seconds=1))


def test_jobs_with_allocations_cannot_be_deleted() -> None:
    allocation = AllocationFactory()
    with pytest.raises(Exception, match="protected"):
        Job.objects.filter(pk=allocation.job_id).delete()


def test_a_job_cannot_bill_another_teams_project() -> None:
    from tests.factories import ProjectFactory

    job = JobFactory.build(team=TeamFactory(), project=ProjectFactory())
    with pytest.raises(ValidationError) as caught:
        job.full_clean()
    assert "belongs to another team" in str(caught.value.message_dict["project"])
