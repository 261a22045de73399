"""Database rows + a gateway :class:`~scheduler.gateways.protocol.Observation` → the engine's frozen
:class:`~scheduler.core.Snapshot` (DESIGN.md §1, step 1).

Who knows what: the cluster (the observation) knows the nodes as they are now — present or gone, their MIG
layouts and changes in flight, cordons and interruption notices; the database knows the work — pending jobs,
what each running job holds (live :class:`~jobs.models.Allocation` rows), quotas, past preemptions and
which pending jobs resume after an infrastructure loss (:func:`jobs.selectors.jobs.resuming_jobs`). An
admin's cordon in the inventory also closes a node. Ids: a job is its primary key as a string, a team its
slug. Times are epoch seconds; job durations and checkpoint intervals (virtual seconds of work) are divided
by the observation's ``clock_speed`` so the engine's ETAs come out in real seconds. A team's typical run time
is measured from its jobs' real start and finish times, so it is in real seconds already.
"""

from __future__ import annotations

import functools
import logging
import operator
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, NamedTuple, TypeVar, cast

from django.db.models import Count, F, QuerySet, Window
from django.db.models.functions import RowNumber

from jobs.models import Allocation, Job, JobEvent
from jobs.selectors.jobs import resuming_jobs
from jobs.services.loop import MoveOutcome
from scheduler.bridge.provisioning import census_offerings
from scheduler.core import Job as CoreJob
from scheduler.core import (
    ModelProfile,
    Node,
    NodeCensus,
    Policy,
    Preemption,
    Request,
    Running,
    Slot,
    Snapshot,
    Team,
    memory_model_for,
)
from scheduler.core.model.provisioning import Provisioning
from scheduler.core.model.vocabulary import (
    CapacityTier,
    Dtype,
    EventType,
    Fabric,
    Interconnect,
    JobKind,
    JobState,
    JobTier,
    ModelMode,
    NodeState,
    Priority,
    ReconfigurationMode,
)
from scheduler.gateways.protocol import MigConfigState, NodeObservation, Observation
from scheduler.kept_rows import KeptRows
from scheduler.models import Node as NodeRow
from scheduler.models import admin_holds
from teams.models import Quota
from teams.models import Team as TeamRow

log = logging.getLogger(__name__)

_E = TypeVar("_E", bound=Enum)

RUNTIME_HISTORY_JOBS = 50  # a team's typical run time is the median over this many of its latest completed jobs


@dataclass(frozen=True, slots=True)
class SnapshotBuild:
    """The snapshot and the pending rows it could not read."""

    snapshot: Snapshot
    # Pending rows that could not be read as an engine job (a row written past the services), by snapshot id,
    # with why: the cycle rejects them, so one bad row never stops the cycle.
    unreadable: Mapping[str, str] = field(default_factory=dict)


class _JobRow(NamedTuple):
    """What the snapshot reads of a job row. The bulk reads fetch it as a value tuple, not a model instance: a
    cycle reads every pending and running job, and a model instance costs several times a tuple to load (every
    column converted, JSON decoded, related rows built)."""

    pk: int
    state: str
    team: str  # the team's slug
    project: str | None  # the project's code
    kind: str
    priority: str
    replicas: int
    gpu_model: str
    preemptible: bool
    checkpoint_interval_s: int | None
    tier: str
    duration_s: int | None
    rank: int
    submitted_at: datetime
    started_at: datetime | None
    consolidate: bool
    gpus: int | None
    mig_profile: str
    memory_gib: Decimal | None
    model: Any  # JSON as stored: read by _request, which rejects what is not a model profile


# The columns of _JobRow, in its order: its fields, the team and the project through their relations.
_JOB_COLUMNS = tuple({"team": "team__slug", "project": "project__code"}.get(name, name) for name in _JobRow._fields)


def _job_rows(jobs: QuerySet[Job]) -> Iterator[_JobRow]:
    return map(_JobRow._make, jobs.values_list(*_JOB_COLUMNS))


_kept_job_rows = KeptRows(_JobRow._make)  # the pending and running rows of the last build


def _row_of(job: Job) -> _JobRow:
    """A model instance a caller already holds, as the snapshot reads a row."""
    return _JobRow(
        pk=job.pk,
        state=job.state,
        team=job.team.slug,
        project=job.project.code if job.project is not None else None,
        kind=job.kind,
        priority=job.priority,
        replicas=job.replicas,
        gpu_model=job.gpu_model,
        preemptible=job.preemptible,
        checkpoint_interval_s=job.checkpoint_interval_s,
        tier=job.tier,
        duration_s=job.duration_s,
        rank=job.rank,
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        consolidate=job.consolidate,
        gpus=job.gpus,
        mig_profile=job.mig_profile,
        memory_gib=job.memory_gib,
        model=job.model,
    )


class _NodeRow(NamedTuple):
    """What the snapshot reads of an observed node's inventory row (:func:`_node`)."""

    state: str
    state_source: str
    price_per_gpu_hour: Decimal
    released: bool  # an autoscaled node given back to its pool (scheduler.autoscaled): never capacity again

    @property
    def held_closed(self) -> bool:
        return admin_holds(state=self.state, source=self.state_source)


def build(
    observation: Observation, policy: Policy, now: float, provisioning: Provisioning | None = None
) -> SnapshotBuild:
    """The engine's view of ``observation`` and the database at ``now`` (module doc); ``provisioning``: the on-demand
    capacity that can be asked for (:mod:`scheduler.bridge.provisioning`; None: none)."""
    speed = observation.clock_speed if observation.clock_speed > 0 else 1.0
    inventory = {
        name: _NodeRow(state, source, price, released_at is not None)
        for name, state, source, price, released_at in NodeRow.objects.values_list(
            "name", "state", "state_source", "price_per_gpu_hour", "released_at"
        )
    }
    observed = {obs.name for obs in observation.nodes}
    # A released autoscaled node the cluster no longer reports is gone for good, not capacity to wait for.
    absent = sorted(name for name, row in inventory.items() if name not in observed and not row.released)
    # A released autoscaled node is never capacity again, even while the autoscaler still reports it: left out.
    nodes = tuple(
        _node(obs, row, now)
        for obs in observation.nodes
        if (row := inventory.get(obs.name)) is None or not row.released
    )
    if absent:  # rare (a node being replaced): only these need their GPUs' layouts
        rows = NodeRow.objects.filter(name__in=absent).select_related("gpu_model").prefetch_related("gpus")
        nodes += tuple(_absent(row) for row in rows.order_by("name"))
    # Newest first, as the job table's default order has always given them (the engine orders them itself).
    # Each cycle reads the same rows, most unchanged: those are not converted again (scheduler.kept_rows).
    jobs = _kept_job_rows.read(
        Job.objects.filter(state__in=[JobState.PENDING, JobState.RUNNING])
        .order_by("-submitted_at", "-id")
        .values_list(*_JOB_COLUMNS)
    )
    pending_jobs: list[CoreJob] = []
    unreadable: dict[str, str] = {}
    # Every pending job's, asked of the database as a subquery (resuming_jobs): the rows above are those jobs.
    resuming = resuming_jobs(Job.objects.filter(state=JobState.PENDING).values("pk"))
    for job in jobs:
        if job.state != JobState.PENDING:
            continue
        try:
            pending_jobs.append(_engine_jobs.get(job, speed, resumes=job.pk in resuming))
        except (ValueError, TypeError, KeyError, ArithmeticError) as error:
            log.error("job %s: its row cannot be read as a job (%r); rejected", job.pk, error)
            unreadable[str(job.pk)] = (
                f"invalid request: the stored job cannot be read ({type(error).__name__}: {error})"
            )
    pending = tuple(pending_jobs)
    running = _running([job for job in jobs if job.state == JobState.RUNNING], observation, speed)
    _engine_jobs.turn()
    _kept_running.turn()
    snapshot = Snapshot(
        nodes=nodes,
        teams=teams_current(),
        running=running,
        pending=pending,
        preemptions=_preemptions(now - policy.ping_pong_window_s),
        provisioning=provisioning or Provisioning(),
    )
    return SnapshotBuild(snapshot=snapshot, unreadable=unreadable)


def _node(obs: NodeObservation, row: _NodeRow | None, now: float) -> Node:
    mig = obs.mig
    reconfiguring_until = None
    status = obs.mig_status
    if status.state in (MigConfigState.PENDING, MigConfigState.REBOOTING):
        # As in the simulator: the engine sees the layout being applied, closed until it is ready. A backend
        # without an estimate keeps the node closed for at least one more cycle.
        if status.desired is not None:
            mig = status.desired
        reconfiguring_until = status.ready_at if status.ready_at and status.ready_at > now else now + 1.0
    # An admin's cordon or drain closes the node whatever the cluster says (a notice closes it below).
    closed = row is not None and row.held_closed
    price = obs.price_per_gpu_hour
    if price is None:
        price = float(row.price_per_gpu_hour) if row is not None else 0.0
    return Node(
        name=obs.name,
        gpu_model=obs.gpu_model,
        gpu_count=obs.gpu_count,
        interconnect=Interconnect(obs.interconnect),
        leaf=obs.leaf,
        spine=obs.spine,
        tier=CapacityTier(obs.tier),
        price_per_gpu_hour=price,
        zone=obs.zone,
        schedulable=obs.schedulable and obs.interruption is None and not closed,
        mig=tuple(tuple(layout) for layout in mig),
        reconfiguring_until=reconfiguring_until,
        fabric=_fabric(obs.fabric),
        placement_group=obs.placement_group,
        pool=obs.pool,
        reconfiguration=_reconfiguration(obs.reconfiguration),
    )


def _reconfiguration(observed: str) -> ReconfigurationMode:
    """How the node changes its MIG layout; one this engine does not know is read as the relabel flow (the slow,
    budgeted one: never a promise of a change ready at once that the node cannot keep)."""
    known = {mode.value for mode in ReconfigurationMode}
    return ReconfigurationMode(observed) if observed in known else ReconfigurationMode.RELABEL


def _fabric(observed: str) -> Fabric:
    """The observed fabric; one this engine does not know is no fabric a gang can count on (TCP)."""
    return Fabric(observed) if observed in {f.value for f in Fabric} else Fabric.TCP


def _absent(row: NodeRow) -> Node:
    """An inventory node the cluster does not report (a interrupted spot node, a node being replaced): closed to
    new work, but still counted as capacity that exists, so work that only fits there waits for it instead of
    being rejected. Deleting the inventory row retires it."""
    layouts = {gpu.index: tuple((str(p), int(s)) for p, s in gpu.mig_layout) for gpu in row.gpus.all()}
    return Node(
        name=row.name,
        gpu_model=row.gpu_model.name,
        gpu_count=row.gpu_count,
        interconnect=Interconnect(row.interconnect),
        leaf=row.leaf_switch,
        spine=row.spine,
        tier=CapacityTier(row.tier),
        price_per_gpu_hour=float(row.price_per_gpu_hour),
        zone=row.zone,
        schedulable=False,
        fabric=_fabric(row.fabric),
        placement_group=row.placement_group,
        mig=tuple(layouts.get(i, ()) for i in range(row.gpu_count)),
        pool=row.pool,
    )


def inventory_nodes() -> tuple[Node, ...]:
    """Every inventory node as capacity that exists (closed to placement, as :func:`_absent` makes it): what a
    submit judges a job against, to refuse one the engine could never run."""
    rows = NodeRow.objects.filter(released_at__isnull=True).select_related("gpu_model").prefetch_related("gpus")
    return tuple(_absent(row) for row in rows.order_by("name"))


def inventory_census() -> NodeCensus:
    """:class:`~scheduler.core.NodeCensus` of :func:`inventory_nodes` and of the nodes the enabled autoscaled pools
    could still add, counted by the database (one GROUP BY of the few columns a rejection reads, instead of every node
    and GPU row, and one read of the pools): what a submit judges a job against. A job only a pool can serve (a
    2-node gang on a cluster of one node) is not one that can never run: the cycle's own screening counts the pools
    too (scheduler.core.decisions.screening)."""
    columns = ("gpu_model__name", "gpu_count", "tier", "fabric", "pool")
    rows = NodeRow.objects.filter(released_at__isnull=True).order_by().values_list(*columns).annotate(count=Count("pk"))
    # As inventory_nodes makes them (_absent): no time-slicing, no host limits, an unknown fabric counted as TCP.
    counts: list[tuple[str, int, str, str, int]] = []
    pooled: defaultdict[str, int] = defaultdict(int)
    for model, gpus, tier, fabric, pool, n in rows:
        counts.append((model, gpus, str(CapacityTier(tier)), str(_fabric(fabric)), n))
        if pool:
            pooled[pool] += n
    return NodeCensus.of_counts(counts, pooled, census_offerings())


def inventory_observation(now: float, clock_speed: float) -> Observation:
    """The cluster as the inventory last recorded it, for a question asked outside a cycle (what a job submitted
    now would get: :mod:`scheduler.bridge.preview`). The loop copies every observation into the inventory, so this
    is the last cycle's view less what the inventory does not keep: a reconfiguration in flight shows its old layout,
    and an interruption notice shows as a draining node. Only ready nodes take new work; a gone node is left out
    (:func:`build` counts it as capacity that exists)."""
    rows = (
        NodeRow.objects.exclude(state=NodeState.GONE)
        .filter(released_at__isnull=True)
        .select_related("gpu_model")
        .prefetch_related("gpus")
    )
    nodes = [row.observation(schedulable=row.state == NodeState.READY) for row in rows.order_by("name")]
    return Observation(observed_at=now, nodes=tuple(nodes), jobs={}, clock_speed=clock_speed)


def queue_snapshot(pending: Iterable[Job]) -> Snapshot:
    """What :func:`scheduler.core.queue_order` needs between cycles, from the database alone: the inventory's
    nodes (closed, as :func:`inventory_nodes`), the teams, the running work as its live allocations hold it, and
    ``pending`` (rows that cannot be read as an engine job are left out: the next cycle rejects them). Job
    durations stay in the rows' seconds: the order does not depend on them."""
    running = _job_rows(Job.objects.filter(state=JobState.RUNNING))
    jobs: list[CoreJob] = []
    rows = [_row_of(job) for job in pending]
    resuming = resuming_jobs([job.pk for job in rows])
    for row in rows:
        try:
            jobs.append(_job(row, 1.0, resumes=row.pk in resuming))
        except (ValueError, TypeError, KeyError, ArithmeticError):
            continue
    return Snapshot(
        nodes=inventory_nodes(), teams=teams_current(), running=_running(running, None, 1.0), pending=tuple(jobs)
    )


def teams_current() -> tuple[Team, ...]:
    """Every team with its quotas and its typical run time, as the engine's :class:`~scheduler.core.Team`
    (named by slug)."""
    quotas: dict[int, list[tuple[str, Decimal, Decimal]]] = defaultdict(list)
    for team_id, gpu_class, guaranteed, burst in Quota.objects.order_by().values_list(
        "team_id", "gpu_class", "guaranteed_gpus", "burst_gpus"
    ):
        quotas[team_id].append((gpu_class, guaranteed, burst))
    runtimes = typical_runtimes_s()
    result = []
    for team_id, slug, weight in TeamRow.objects.order_by("slug").values_list("pk", "slug", "weight"):
        # By class in Python's (code point) order, not the database's: PostgreSQL sorts text by the database's
        # collation (https://www.postgresql.org/docs/current/collation.html), which may put "any" before or after
        # "H100", and the engine's tuples must not depend on the database.
        mine = sorted(quotas.get(team_id, []))
        result.append(
            Team(
                name=slug,
                weight=float(weight),
                guaranteed=tuple((gpu_class, float(guaranteed)) for gpu_class, guaranteed, _ in mine),
                burst=tuple((gpu_class, float(burst)) for gpu_class, _, burst in mine),
                typical_runtime_s=runtimes.get(team_id),
            )
        )
    return tuple(result)


def typical_runtimes_s() -> dict[int, float]:
    """Team id → the median run time (finished − started, seconds) of the team's latest
    :data:`RUNTIME_HISTORY_JOBS` completed jobs; a team without one is absent.

    Only ``completed`` jobs count: a failed, cancelled or rejected job says nothing about how long the team's
    work takes. An evicted run is not a job's run time either: ``started_at`` is the start of the job's last
    run (every bind rewrites it), so a job evicted and run again counts the run that completed. One query for
    every team: the database numbers each team's completed jobs, latest finish first, and keeps the first ones.
    """
    latest_first = Window(RowNumber(), partition_by=[F("team_id")], order_by=[F("finished_at").desc(), F("id").desc()])
    rows = (
        Job.objects.filter(state=JobState.COMPLETED, started_at__isnull=False, finished_at__isnull=False)
        .annotate(latest=latest_first)
        .filter(latest__lte=RUNTIME_HISTORY_JOBS)
        .order_by()
        .values_list("team_id", "started_at", "finished_at")
    )
    runs: dict[int, list[float]] = defaultdict(list)
    for team_id, started_at, finished_at in rows:
        assert started_at is not None and finished_at is not None  # the query keeps only rows with both
        # A row written past the services could finish before it started: a run time is never negative.
        runs[team_id].append(max(0.0, (finished_at - started_at).total_seconds()))
    return {team_id: float(statistics.median(seconds)) for team_id, seconds in runs.items()}


# The columns of a row that _job reads: all but the state and the start time. Keyed by them, the job the last cycle
# bound, read running now, is still the engine job made from its pending row (tens of thousands of jobs after a
# first cycle on an empty cluster), and a job requeued is the one it was while it ran.
_job_key: Callable[[_JobRow], tuple[Any, ...]] = operator.itemgetter(
    *(i for i, name in enumerate(_JobRow._fields) if name not in ("state", "started_at"))
)


class _EngineJobs:
    """The engine jobs of the last :func:`build`, by the columns (:func:`_job_key`, and the speed, and resumption)
    each was made from: a job whose columns did not change since is the same frozen object, not made again (most
    of a queue, most cycles). Only the last build's are kept, so the memory is one queue's. A row whose stored
    model is a JSON object cannot be a key and is made every time, as are rows that cannot be read (their error is
    raised again)."""

    def __init__(self) -> None:
        # Key -> (that key, the job): an entry found is kept whole, so a build leaves no new object behind for an
        # unchanged job (the collector's pass after the cycle walks only what changed: scheduler.gcpause).
        self._last: dict[tuple[Any, ...], tuple[tuple[Any, ...], CoreJob]] = {}
        self._now: dict[tuple[Any, ...], tuple[tuple[Any, ...], CoreJob]] = {}

    def get(self, row: _JobRow, speed: float, *, resumes: bool = False) -> CoreJob:
        key = (_job_key(row), speed, resumes)
        try:
            entry = self._last.get(key)
        except TypeError:  # unhashable: the model's JSON object
            return _job(row, speed, resumes=resumes)
        if entry is None:
            entry = (key, _job(row, speed, resumes=resumes))
        self._now[entry[0]] = entry
        return entry[1]

    def keep(self, row: _JobRow, speed: float, job: CoreJob) -> None:
        """``job``, made from ``row`` at ``speed`` by an earlier build, is this build's too (a kept
        :class:`Running` holds it), so the next build may reuse it."""
        key = (_job_key(row), speed, False)
        entry = self._last.get(key)
        if entry is None or entry[1] is not job:
            entry = (key, job)
        self._now[entry[0]] = entry

    def turn(self) -> None:
        """The build is done: what it made is what the next one may reuse."""
        self._last, self._now = self._now, {}


_engine_jobs = _EngineJobs()


def core_job(job: Job, speed: float = 1.0) -> CoreJob:
    """A database job as the engine's :class:`~scheduler.core.Job`."""
    return _job(_row_of(job), speed)


def _job(job: _JobRow, speed: float, *, resumes: bool = False) -> CoreJob:
    return CoreJob(
        id=str(job.pk),
        team=job.team,
        request=_request(job),
        kind=_member(JobKind, job.kind),
        priority=_member(Priority, job.priority),
        replicas=job.replicas,
        gpu_model=job.gpu_model or None,
        preemptible=job.preemptible,
        checkpoint_interval_s=job.checkpoint_interval_s / speed if job.checkpoint_interval_s else None,
        tier=_member(JobTier, job.tier),
        duration_s=job.duration_s / speed if job.duration_s else None,
        rank=job.rank,
        submitted_at=job.submitted_at.timestamp(),
        project=job.project,
        resumes=resumes,
        consolidate=job.consolidate,
    )


@functools.cache
def _members(cls: type[Enum]) -> dict[Any, Enum]:
    return {member.value: member for member in cls}


def _member(cls: type[_E], value: Any) -> _E:
    """``cls(value)``, through a map of the class's values first: an enum's call costs several times a dict look-up,
    and the snapshot makes three for every job of the queue. A value the map lacks goes to the call, which raises
    the enum's own error (the reason an unreadable row is rejected with)."""
    try:
        return cast(_E, _members(cls)[value])
    except (KeyError, TypeError):
        return cls(value)


def _request(job: _JobRow) -> Request:
    if job.gpus is not None:
        return Request(gpus=job.gpus)
    if job.mig_profile:
        return Request(mig_profile=job.mig_profile)
    if job.memory_gib is not None:
        return Request(memory_gib=float(job.memory_gib))
    model = dict(job.model or {})
    return Request(
        model=ModelProfile(
            params_b=float(model["params_b"]),
            dtype=Dtype(model.get("dtype", Dtype.BF16)),
            context=int(model.get("context", 4096)),
            batch=int(model.get("batch", 1)),
            mode=ModelMode(model.get("mode") or memory_model_for(JobKind(job.kind))),  # an old row: the kind's
        )
    )


def _running(jobs: Iterable[_JobRow], observation: Observation | None, speed: float) -> tuple[Running, ...]:
    """Each running job with what it holds: its newest generation's open allocations are where it runs, any older
    open ones the placement a move under way is leaving (``moving_from``, held until the new replicas are ready);
    ``moved_at``: when its moves of the last day started (the ``moved`` events), which the consolidation's per-job
    budget and interval read. In a cycle's build (``observation`` given) a job whose row, allocations, observed
    checkpoint and moves are those of the last build is the same :class:`Running` (:class:`_KeptRunning`)."""
    by_id = {job.pk: job for job in jobs}
    if not by_id:
        return ()
    moved_at = _moves_started(by_id)
    # The running jobs' allocations chosen by a join, not by thousands of ids as parameters (they cost more to
    # pass than the rows to read); a job that started running since its row was read is left out, as it was.
    allocations = Allocation.objects.filter(job__state=JobState.RUNNING, ended_at__isnull=True).order_by(
        "job_id", "generation", "replica", "gpu_index", "mig_start"
    )
    columns = ("job_id", "generation", "replica", "node__name", "gpu_index", "mig_profile", "mig_start")
    held: dict[int, list[_HeldRow]] = defaultdict(list)
    for row in allocations.values_list(*columns):
        if row[0] in by_id:
            held[row[0]].append(row[1:])
    result = []
    for job_id in sorted(held):
        job = by_id[job_id]
        observed = observation.jobs.get(str(job_id)) if observation is not None else None
        checkpoint = observed.last_checkpoint_at if observed is not None else None
        rows, moved = tuple(held[job_id]), moved_at.get(job_id, ())
        if observation is None:
            result.append(_running_job(job, speed, rows, checkpoint, moved))
        else:
            result.append(_kept_running.get(job, speed, rows, checkpoint, moved))
    return tuple(result)


# An open allocation as _running reads it, its job aside: generation, replica, node, GPU, MIG profile, MIG start.
_HeldRow = tuple[int, int, str, int, str, int | None]


def _running_job(
    job: _JobRow, speed: float, rows: Iterable[_HeldRow], checkpoint: float | None, moved: tuple[float, ...]
) -> Running:
    """One running job from its row and its open allocations (in _running's order) (:func:`_running`)."""
    generations: dict[int, dict[int, list[Slot]]] = defaultdict(lambda: defaultdict(list))  # generation -> replica
    for generation, replica, node, gpu, mig_profile, mig_start in rows:
        generations[generation][replica].append(
            Slot(node=node, gpu=gpu, mig_profile=mig_profile or None, mig_start=mig_start)
        )
    newest = max(generations)
    older = [
        replica
        for generation in sorted(generations)
        if generation != newest
        for replica in _replica_slots(generations[generation])
    ]
    return Running(
        job=_engine_jobs.get(job, speed),
        slots=_replica_slots(generations[newest]),
        started_at=(job.started_at or job.submitted_at).timestamp(),
        last_checkpoint_at=checkpoint,
        moving_from=tuple(older),
        moved_at=moved,
    )


class _KeptRunning:
    """The running jobs of the last :func:`build`, by what each was made from (its row, the speed, its open
    allocations, its observed checkpoint, its moves' starts): a running job none of which changed is the same
    frozen :class:`Running`, its slots not made again (most of the running work, most cycles). Kept like
    :class:`_EngineJobs`: the last build's only; a row that cannot be a key is made every time."""

    def __init__(self) -> None:
        # Key -> (that key, the running job), reused whole when found, as _EngineJobs does.
        self._last: dict[tuple[Any, ...], tuple[tuple[Any, ...], Running]] = {}
        self._now: dict[tuple[Any, ...], tuple[tuple[Any, ...], Running]] = {}

    def get(
        self, job: _JobRow, speed: float, rows: tuple[_HeldRow, ...], checkpoint: float | None, moved: tuple[float, ...]
    ) -> Running:
        key = (job, speed, rows, checkpoint, moved)
        try:
            entry = self._last.get(key)
        except TypeError:  # unhashable: the model's JSON object
            return _running_job(job, speed, rows, checkpoint, moved)
        if entry is None:
            entry = (key, _running_job(job, speed, rows, checkpoint, moved))
        else:
            _engine_jobs.keep(job, speed, entry[1].job)
        self._now[entry[0]] = entry
        return entry[1]

    def turn(self) -> None:
        """The build is done: what it made is what the next one may reuse."""
        self._last, self._now = self._now, {}


_kept_running = _KeptRunning()


def _moves_started(jobs: Mapping[int, _JobRow]) -> dict[int, tuple[float, ...]]:
    """Per running job, when its moves of the last 24 hours started, oldest first (one query: the last day's
    ``moved`` events, few, rather than thousands of job ids as parameters)."""
    since = datetime.now(UTC) - timedelta(days=1)
    started: dict[int, list[float]] = defaultdict(list)
    events = JobEvent.objects.filter(type=EventType.MOVED, at__gte=since).order_by("at", "pk")
    for job_id, at, details in events.values_list("job_id", "at", "details"):
        if job_id in jobs and isinstance(details, dict) and details.get("outcome") == MoveOutcome.STARTED:
            started[job_id].append(at.timestamp())
    return {job_id: tuple(times) for job_id, times in started.items()}


def _replica_slots(replicas: Mapping[int, list[Slot]]) -> tuple[tuple[Slot, ...], ...]:
    return tuple(tuple(replica) for _, replica in sorted(replicas.items()))


def _preemptions(since: float) -> tuple[Preemption, ...]:
    events = JobEvent.objects.filter(type=EventType.PREEMPTED, at__gte=datetime.fromtimestamp(since, tz=UTC))
    result = []
    for job_id, at, details in events.order_by("at", "id").values_list("job_id", "at", "details"):
        by = (details or {}).get("by")
        if by:
            result.append(Preemption(victim=str(job_id), by=str(by), at=at.timestamp()))
    return tuple(result)


def pending_read(pks: Iterable[int], speed: float) -> tuple[CoreJob, ...]:
    """The pending jobs among ``pks`` as :func:`build` reads them (durations divided by ``speed``), newest first;
    a row that cannot be read as an engine job is left out (the next cycle rejects it)."""
    rows = list(
        _job_rows(Job.objects.filter(pk__in=list(pks), state=JobState.PENDING).order_by("-submitted_at", "-id"))
    )
    resuming = resuming_jobs([row.pk for row in rows])
    jobs: list[CoreJob] = []
    for row in rows:
        try:
            jobs.append(_job(row, speed, resumes=row.pk in resuming))
        except (ValueError, TypeError, KeyError, ArithmeticError):
            continue
    return tuple(jobs)
