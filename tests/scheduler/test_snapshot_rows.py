"""The snapshot reads its rows as value tuples (scheduler.bridge.snapshot.build): the Snapshot of a varied
database is the one the model-instance reads it replaced built (``snapshot_rows_golden.json``, written by them),
and the number of queries does not grow with the number of jobs."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from datetime import timedelta
from decimal import Decimal
from enum import Enum
from pathlib import Path

import pytest
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.bridge.snapshot import build
from scheduler.core import Policy, Snapshot
from scheduler.gateways.protocol import (
    JobObservation,
    MigConfigState,
    MigStatus,
    NodeObservation,
    Observation,
    ReplicaObservation,
    ReplicaPhase,
)
from scheduler.models import Gpu, Node
from teams.models import Team
from tests.factories import GpuModelFactory, NodeFactory, ProjectFactory, QuotaFactory, TeamFactory

pytestmark = pytest.mark.django_db

GOLDEN = Path(__file__).with_name("snapshot_rows_golden.json")
NOW = timezone.now().replace(microsecond=0)
TIMES = {"submitted_at", "started_at", "last_checkpoint_at", "moved_at", "at", "reconfiguring_until"}
IDS = {"id", "victim", "by"}


def _job(team: Team, name: str, minutes_ago: int, **fields: object) -> Job:
    request = {} if {"gpus", "mig_profile", "memory_gib", "model"} & set(fields) else {"gpus": 1}
    submitted = NOW - timedelta(minutes=minutes_ago)
    return Job.objects.create(**{"kind": "training", **request, **fields}, team=team, name=name, submitted_at=submitted)


def _running(team: Team, name: str, holds: list[tuple[Node, int, int, str, int | None]], **fields: object) -> Job:
    """A running job holding ``(node, generation, gpu, mig_profile, mig_start)`` per replica row, in order."""
    job = _job(team, name, 180, state="running", started_at=NOW - timedelta(hours=2), **fields)
    replicas: dict[int, int] = {}
    for node, generation, gpu, profile, start in holds:
        replica = replicas.get(generation, 0)
        replicas[generation] = replica + 1
        Allocation.objects.create(
            job=job,
            replica=replica,
            node=node,
            gpu_index=gpu,
            mig_profile=profile,
            mig_start=start,
            generation=generation,
            tier=node.tier,
            price_per_gpu_hour=Decimal("2.1"),
            started_at=job.started_at,
        )
    return job


def _varied() -> tuple[Observation, dict[str, str]]:
    """Nodes observed, absent, held by an admin and reconfiguring; teams with quotas and a history; pending jobs
    of every request form, resuming and unreadable; running jobs on whole GPUs and MIG instances, one moving;
    moves and preemptions in and out of their windows. Returns the observation and job names by snapshot id."""
    a100 = GpuModelFactory(name="A100-SXM4-80GB", gpu_class="A100", memory_mib=81920, mig_capable=True)
    h100 = GpuModelFactory(name="H100-SXM5-80GB", gpu_class="H100", memory_mib=81920, mig_capable=True)
    whole = NodeFactory(name="a100-whole", gpu_model=a100, tier="reserved", price_per_gpu_hour=Decimal("2.5"))
    mig = NodeFactory(name="a100-mig", gpu_model=a100, tier="on-demand")
    Gpu.objects.create(node=mig, index=0, mig_layout=[["3g.40gb", 0], ["3g.40gb", 4]])
    NodeFactory(name="h100-held", gpu_model=h100, tier="spot", state="cordoned", state_source="admin")
    gone = NodeFactory(name="h100-gone", gpu_model=h100, tier="spot", fabric="efa", placement_group="pg-1")
    Gpu.objects.create(node=gone, index=1, mig_layout=[["1g.10gb", 0]])
    NodeFactory(name="a100-away", gpu_model=a100, interconnect="pcie", gpu_count=4)

    nlp, vision = TeamFactory(slug="nlp", weight=2), TeamFactory(slug="vision")
    for gpu_class, guaranteed in (("any", 4), ("H100", 1), ("A100", 2)):
        QuotaFactory(team=nlp, gpu_class=gpu_class, guaranteed_gpus=guaranteed, burst_gpus=2 * guaranteed)
    for seconds in (60, 180):
        ran = _job(nlp, f"ran-{seconds}", 600, state="completed", finished_at=NOW - timedelta(hours=9))
        Job.objects.filter(pk=ran.pk).update(started_at=ran.finished_at - timedelta(seconds=seconds))
    project = ProjectFactory(team=nlp, code="cc-7")

    _job(nlp, "p-gpus", 50, gpus=2, replicas=2, priority="high", rank=3, preemptible=True, project=project,
         checkpoint_interval_s=600, duration_s=3600, tier="reserved-only", gpu_model="H100")  # fmt: skip
    _job(vision, "p-mig", 40, kind="inference", mig_profile="3g.40gb", duration_s=90)
    _job(vision, "p-memory", 30, kind="inference", memory_gib=Decimal("30.5"), consolidate=True)
    _job(nlp, "p-model", 20, model={"params_b": 7, "dtype": "fp8", "context": 8192})
    _job(nlp, "p-model-mode", 20, kind="inference", model={"params_b": 70, "batch": 4, "mode": "training"})
    resuming = _job(nlp, "p-resuming", 10)
    JobEvent.objects.create(
        job=resuming, type="preempted", at=NOW - timedelta(hours=1), details={"reason": "node-lost"}
    )
    preempted = _job(nlp, "p-preempted", 10)
    JobEvent.objects.create(job=preempted, type="preempted", at=NOW - timedelta(minutes=5), details={"reason": "x"})
    _job(vision, "p-bad-dtype", 5, model={"params_b": 1, "dtype": "fp3"})
    _job(vision, "p-bad-size", 5, model={"params_b": "lots"})
    _job(vision, "p-no-size", 5, model={})

    gang = _running(nlp, "r-gang", [(whole, 0, 0, "", None), (whole, 0, 1, "", None)], replicas=2, duration_s=7200)
    sliced = _running(vision, "r-mig", [(mig, 0, 0, "3g.40gb", 0)], kind="inference", mig_profile="3g.40gb")
    moving = _running(nlp, "r-moving", [(whole, 0, 2, "", None), (mig, 1, 3, "", None)], checkpoint_interval_s=900)
    for outcome, hours in (("started", 1), ("completed", 1), ("started", 30)):
        JobEvent.objects.create(job=moving, type="moved", at=NOW - timedelta(hours=hours), details={"outcome": outcome})
    for victim, by, minutes in ((gang, sliced.pk, 10), (sliced, None, 5), (moving, gang.pk, 45)):
        details = {"reason": "priority", **({"by": by} if by else {})}
        JobEvent.objects.create(job=victim, type="preempted", at=NOW - timedelta(minutes=minutes), details=details)

    layouts = ((("3g.40gb", 0), ("3g.40gb", 4)),) + ((),) * 7
    observation = Observation(
        observed_at=NOW.timestamp(),
        clock_speed=2.0,
        nodes=(
            NodeObservation(
                name="a100-whole",
                gpu_model=a100.name,
                gpu_count=8,
                interconnect="nvswitch",
                tier="reserved",
                reconfiguration="dynamic",  # a DRA driver's dynamic MIG: its changes are ready at once
            ),
            NodeObservation(
                name="a100-mig",
                gpu_model=a100.name,
                gpu_count=8,
                interconnect="nvswitch",
                tier="on-demand",
                mig=layouts,
                price_per_gpu_hour=3.25,
                mig_status=MigStatus(state=MigConfigState.PENDING, desired=((("7g.80gb", 0),),) + ((),) * 7),
            ),
            NodeObservation(name="h100-held", gpu_model=h100.name, gpu_count=8, interconnect="nvswitch", tier="spot"),
            NodeObservation(
                name="x-new",
                gpu_model=h100.name,
                gpu_count=8,
                interconnect="pcie",
                tier="spot",
                fabric="myrinet",
                reconfiguration="overnight",  # a mode this engine does not know: the relabel flow's (slow, budgeted)
                price_per_gpu_hour=4.0,
            ),
        ),
        jobs={
            str(gang.pk): JobObservation(
                job=str(gang.pk),
                namespace="ns-nlp",
                replicas=(ReplicaObservation(replica=0, phase=ReplicaPhase.RUNNING, node="a100-whole"),),
                last_checkpoint_at=(NOW - timedelta(minutes=3)).timestamp(),
            )
        },
    )
    return observation, {str(pk): name for pk, name in Job.objects.values_list("pk", "name")}


def _plain(value: object, names: dict[str, str], key: str = "") -> object:
    """``value`` as JSON, its job ids as the jobs' names and its instants as seconds before :data:`NOW`, so that
    it does not depend on the database's ids or the day the test runs."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), names, f.name) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item, names, key) for item in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, names, str(k)) for k, v in value.items()}
    if isinstance(value, Enum):
        return value.value
    if key in IDS and isinstance(value, str):
        return names[value]
    if key in TIMES and isinstance(value, float):
        return round(NOW.timestamp() - value, 3)
    return value


def test_the_snapshot_of_a_varied_database_is_the_golden_one() -> None:
    observation, names = _varied()
    built = build(observation, Policy(), NOW.timestamp())
    unreadable = {names[job_id]: reason for job_id, reason in built.unreadable.items()}
    actual = {"snapshot": _plain(built.snapshot, names), "unreadable": unreadable}
    assert actual == json.loads(GOLDEN.read_text())


def _jobs(count: int) -> Observation:
    """``count`` pending jobs (each preempted once before) and ``count`` running ones (each on its own GPU, moved
    once), on as many 8-GPU nodes as that takes, every node observed."""
    team = TeamFactory(slug="busy")
    QuotaFactory(team=team)
    nodes = [NodeFactory(name=f"n-{i:03d}") for i in range(-(-count // 8))]
    for i in range(count):
        pending = _job(team, f"p-{i}", i)
        JobEvent.objects.create(job=pending, type="preempted", at=NOW, details={"reason": "node-lost", "by": "1"})
        running = _running(team, f"r-{i}", [(nodes[i // 8], 0, i % 8, "", None)])
        JobEvent.objects.create(job=running, type="moved", at=NOW, details={"outcome": "started"})
    return Observation(
        observed_at=NOW.timestamp(),
        nodes=tuple(
            NodeObservation(name=n.name, gpu_model="A100-SXM4-80GB", gpu_count=8, interconnect="nvswitch", tier="spot")
            for n in nodes
        ),
        jobs={},
    )


@pytest.mark.parametrize("count", [5, 300])
def test_the_number_of_queries_does_not_grow_with_the_jobs(count: int, django_assert_num_queries) -> None:
    observation = _jobs(count)
    # Nodes, jobs, resuming jobs, moves, live allocations, quotas, run-time history, teams, preemptions.
    with django_assert_num_queries(9):
        snapshot: Snapshot = build(observation, Policy(), NOW.timestamp()).snapshot
    assert (len(snapshot.pending), len(snapshot.running), len(snapshot.preemptions)) == (count, count, count)
    assert all(job.resumes for job in snapshot.pending)
    assert all(len(running.moved_at) == 1 for running in snapshot.running)


def test_an_absent_node_costs_two_queries_more_whatever_the_jobs(django_assert_num_queries) -> None:
    observation = _jobs(5)
    fewer = Observation(observed_at=observation.observed_at, nodes=(), jobs={})
    # ... its inventory row with its GPU model, and its GPUs' layouts.
    with django_assert_num_queries(11):
        snapshot = build(fewer, Policy(), NOW.timestamp()).snapshot
    assert [(node.name, node.schedulable) for node in snapshot.nodes] == [("n-000", False)]
