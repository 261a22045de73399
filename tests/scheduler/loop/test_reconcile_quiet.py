"""Reconcile loads only the running jobs that are not quiet (scheduler.loop.reconcile, ``_quiet``): every job it
calls quiet is one whose repair has nothing to record nor apply. Checked against the repair itself over every
combination of replica phases and generations, allocations, nodes present and drains (no database: a quiet job's
repair reads only the job's id, its replicas and its allocations' nodes and generations)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import combinations_with_replacement, product
from types import SimpleNamespace
from typing import Any

from scheduler.gateways.protocol import JobObservation, Observation, ReplicaObservation, ReplicaPhase
from scheduler.loop.notice import Drain
from scheduler.loop.reconcile import Repairs, _Context, _Held, _quiet, _running_job, _RunningRow

AT = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
PHASES = tuple(ReplicaPhase)
DRAIN = Drain(node="n-1", source="test", drained_at=AT.timestamp(), deadline_at=None, grace_s=30.0)


def _allocation(generation: int, node: str) -> Any:
    return SimpleNamespace(generation=generation, node=SimpleNamespace(name=node), started_at=AT, replica=0)


def _cases() -> Any:
    """(replicas, allocations as (generation, node), observed replicas as (phase, generation) or None, drain)."""
    held = [((0, "n-1"),), ((0, "n-1"), (0, "n-2")), ((0, "gone"),), ((0, "n-1"), (1, "n-2")), ((1, "n-1"),), ()]
    reported: list[Any] = [None]
    for count in (0, 1, 2, 3):
        reported += list(combinations_with_replacement(product(PHASES, (0, 1)), count))
    yield from product((1, 2), held, reported, (None, DRAIN))


def test_a_job_called_quiet_has_nothing_to_repair() -> None:
    present = frozenset({"n-1", "n-2"})
    quiet = 0
    for replicas, allocations, observed, drain in _cases():
        view = None
        if observed is not None:
            view = JobObservation(
                job="7",
                namespace="ns",
                replicas=tuple(
                    ReplicaObservation(replica=i, phase=phase, node="n-1", generation=generation, ready=True)
                    for i, (phase, generation) in enumerate(observed)
                ),
            )
        row = _RunningRow(pk=7, replicas=replicas, submitted_at=AT)
        held = [_Held(generation, node) for generation, node in allocations]
        if not _quiet(row, held, view, drain, present):
            continue
        quiet += 1
        observation = Observation(observed_at=AT.timestamp(), nodes=(), jobs={"7": view} if view else {})
        context = _Context(observation, present, AT, 30.0, 600.0, requeued=set())  # type: ignore[arg-type]
        job = SimpleNamespace(pk=7, replicas=replicas)
        repairs = Repairs()
        _running_job(job, [_allocation(g, n) for g, n in allocations], drain, context, repairs)  # type: ignore[arg-type]
        assert repairs == Repairs(), (replicas, allocations, observed, drain)
    assert quiet > 20  # the rule does call the common cases quiet (one generation, replicas running)
