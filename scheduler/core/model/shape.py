"""A job's shape: everything the engine's remembered answers about a job depend on, apart from its identity.

Jobs of one shape are placed, sized, routed and explained alike, so caches (:mod:`scheduler.core.speedups`)
key their answers by a projection of the :class:`Shape` — the part of it the answer reads, so that jobs that
differ elsewhere share it:

- :attr:`Shape.placement` — what :func:`~scheduler.core.placement.find_slots` reads (request, kind, model
  constraint, tier, production or not, replicas, host needs);
- :attr:`Shape.demand` — what right-sizing and tier routing read (a job's options, a reconfiguration's demand);
- :attr:`Shape.size` — what the fewest units a job could hold depend on (fair share's order);
- :attr:`Shape.helps` — what decides whether evicting a job frees capacity another job could use;
- :attr:`Shape.preemption` — what a preemption search reads besides the team.

Every field of :class:`~scheduler.core.model.snapshot.Job` is either in :class:`Shape` or in :data:`IRRELEVANT` with the
reason no cache keyed by a shape reads it (``tests/scheduler/core/model/test_shape.py`` checks), so a new field
cannot silently make a cache stale.

A shape is a named tuple: hashed and compared in C, as a cache key is on every lookup.
"""

from __future__ import annotations

from typing import NamedTuple

from scheduler.core.model.snapshot import Job, ModelProfile, Request
from scheduler.core.model.vocabulary import JobKind, JobTier, Priority

RequestKey = tuple[int | None, str | None, float | None, ModelProfile | None, int | None]

IRRELEVANT: dict[str, str] = {
    "id": "identity: jobs of one shape share answers",
    "team": "a cache whose answer depends on the team keys by the team as well",
    "checkpoint_interval_s": "read live when victims are ordered, never remembered",
    "duration_s": "read live for expected runtimes (reservations, ETAs), never remembered",
    "rank": "queue order only",
    "submitted_at": "queue order and ageing only, read live",
    "project": "billing only",
    "resumes": "queue order only, read live",
    "consolidate": "read live when running production is moved to its right size, after placement",
}


def request_key(request: Request) -> RequestKey:
    """A request as a plain tuple: hashed and compared in C, where a dataclass's hash and equality run Python
    code on every lookup of a cache keyed by it."""
    return (request.gpus, request.mig_profile, request.memory_gib, request.model, request.gpu_milli)


class Shape(NamedTuple):
    """The fields of a job its cached answers may read (module doc)."""

    request: RequestKey
    kind: JobKind
    gpu_model: str | None
    tier: JobTier
    priority: Priority
    preemptible: bool
    replicas: int
    cpu_milli: int
    memory_mib: int

    @classmethod
    def of(cls, job: Job) -> Shape:
        return cls(
            request_key(job.request),
            job.kind,
            job.gpu_model,
            job.tier,
            job.priority,
            job.preemptible,
            job.replicas,
            job.cpu_milli,
            job.memory_mib,
        )

    @property
    def production(self) -> bool:
        return self.priority == Priority.PRODUCTION

    @property
    def placement(self) -> tuple[object, ...]:
        return (
            self.request,
            self.kind,
            self.gpu_model,
            self.tier,
            self.production,
            self.replicas,
            self.cpu_milli,
            self.memory_mib,
        )

    @property
    def demand(self) -> tuple[object, ...]:
        return (self.request, self.kind, self.gpu_model, self.tier, self.production)

    @property
    def size(self) -> tuple[object, ...]:
        return (self.request, self.kind, self.gpu_model, self.replicas)

    @property
    def helps(self) -> tuple[object, ...]:
        return (self.request, self.kind, self.gpu_model, bool(self.cpu_milli), bool(self.memory_mib))

    @property
    def preemption(self) -> tuple[object, ...]:
        return (self.placement, self.priority, self.preemptible)


def placement_shape(job: Job) -> tuple[object, ...]:
    """:attr:`Shape.placement` of ``job``: everything :func:`find_slots` depends on in it. Built directly, not
    through :meth:`Shape.of`: a cycle asks it of every pending job several times (hundreds of thousands of times
    at 5,000 nodes), and the whole shape's named tuple costs more than the projection
    (``tests/scheduler/core/model/test_shape.py`` checks the two agree)."""
    return (
        request_key(job.request),
        job.kind,
        job.gpu_model,
        job.tier,
        job.priority == Priority.PRODUCTION,
        job.replicas,
        job.cpu_milli,
        job.memory_mib,
    )


def sizing_shape(job: Job) -> tuple[object, ...]:
    """:attr:`Shape.demand` of ``job`` (what right-sizing and tier routing read), built directly as
    :func:`placement_shape` is: a job's options are looked up by it several times per turn."""
    return (request_key(job.request), job.kind, job.gpu_model, job.tier, job.priority == Priority.PRODUCTION)


def size_shape(job: Job) -> tuple[object, ...]:
    """:attr:`Shape.size` of ``job`` (all the fewest units it could hold depend on), built directly as
    :func:`placement_shape` is: the fair order asks it each time it keys a team's next job."""
    return (request_key(job.request), job.kind, job.gpu_model, job.replicas)
