"""One shape of a job keys every cache (:mod:`scheduler.core.model.shape`): a new field of ``Job`` must be placed in
the shape or declared irrelevant, so that no cache keyed by a shape goes stale on it."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from scheduler.core.model.shape import IRRELEVANT, Shape, placement_shape, size_shape, sizing_shape
from scheduler.core.model.snapshot import Job, Request
from scheduler.core.model.vocabulary import JobKind, JobTier, Priority

BASE = Job(id="a", team="t", request=Request(gpus=1))


def test_every_job_field_is_in_the_shape_or_declared_irrelevant() -> None:
    job_fields = {f.name for f in fields(Job)}
    assert job_fields == set(Shape._fields) | set(IRRELEVANT)
    assert not set(Shape._fields) & set(IRRELEVANT)


CHANGES: list[dict[str, object]] = [
    {"request": Request(gpus=2)},
    {"kind": JobKind.INFERENCE},
    {"gpu_model": "H100"},
    {"tier": JobTier.RESERVED_ONLY},
    {"priority": Priority.PRODUCTION},
    {"replicas": 2},
    {"cpu_milli": 500},
    {"memory_mib": 1024},
]


@pytest.mark.parametrize("change", CHANGES)
def test_what_placement_reads_changes_the_placement_shape(change: dict[str, object]) -> None:
    assert placement_shape(replace(BASE, **change)) != placement_shape(BASE)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(IRRELEVANT))
def test_an_irrelevant_field_changes_no_projection(name: str) -> None:
    value = {"id": "b", "team": "u", "project": "p"}.get(name, 7)
    other = Shape.of(replace(BASE, **{name: value}))  # type: ignore[arg-type]
    assert other == Shape.of(BASE)


def test_projections_keep_only_what_their_answer_reads() -> None:
    low, high = Shape.of(BASE), Shape.of(replace(BASE, priority=Priority.HIGH, preemptible=True))
    assert low.placement == high.placement and low.demand == high.demand and low.size == high.size
    assert low.preemption != high.preemption
    host = Shape.of(replace(BASE, cpu_milli=100))
    assert host.helps != low.helps and host.demand == low.demand and host.size == low.size
    assert Shape.of(replace(BASE, replicas=3)).demand == low.demand
    assert Shape.of(replace(BASE, priority=Priority.PRODUCTION)).production and not low.production


def test_the_direct_projections_are_the_shapes() -> None:
    """placement_shape, sizing_shape and size_shape build their tuples without the whole shape: they must stay its
    projections."""
    jobs = [BASE, *(replace(BASE, **change) for change in CHANGES)]  # type: ignore[arg-type]
    jobs += [replace(BASE, priority=priority) for priority in Priority]
    for job in jobs:
        assert placement_shape(job) == Shape.of(job).placement
        assert sizing_shape(job) == Shape.of(job).demand
        assert size_shape(job) == Shape.of(job).size
