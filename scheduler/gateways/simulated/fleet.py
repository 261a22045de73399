"""The simulated fleet's gateway (package doc): observe, bind, evict, MIG reconfigurations, utilization."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from django.db import transaction
from django.utils import timezone

from scheduler.core.gpus.catalog import LayoutError, compute_fraction, validate_layout
from scheduler.core.model.snapshot import MigLayout
from scheduler.core.model.vocabulary import CapacityTier, JobKind
from scheduler.errors import GatewayConflict
from scheduler.gateways.protocol import (
    LOG_LIMIT_BYTES,
    BindRequest,
    Device,
    Interruption,
    JobObservation,
    LogSource,
    MaintenanceEvent,
    MigConfigState,
    MigStatus,
    NodeObservation,
    NodeRequestSpec,
    Observation,
    ReplicaLog,
    ReplicaObservation,
    ReplicaPhase,
    UtilizationReading,
    device_check,
)
from scheduler.gateways.simulated.autoscaler import (
    node_remove,
    request_forget,
    request_hold,
    request_observations,
    requests_advance,
)
from scheduler.gateways.simulated.batch import Batch
from scheduler.gateways.simulated.binds import BindView
from scheduler.gateways.simulated.checkpoints import SimulatedCheckpoint, checkpoint_of, checkpoint_report
from scheduler.gateways.simulated.lifecycle import replica_lifecycle
from scheduler.gateways.simulated.pods import Pod, PodRow, pod_rows
from scheduler.models import (
    Gpu,
    Node,
    NodeFacts,
    SimulatedNodeState,
    SimulatedPod,
    SimulatedProgress,
    gpu_layouts,
    node_facts,
    node_observation,
)

# How hard each kind of work drives the GPUs it holds, for the utilization graphs: training saturates,
# inference idles between requests. Made-up but stable figures: the simulated fleet has no real load.
_ACTIVITY = {JobKind.TRAINING: 0.92, JobKind.BATCH: 0.8, JobKind.INFERENCE: 0.45}


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """Tunables of the simulated fleet; durations are virtual seconds."""

    speed: float = 60.0  # virtual seconds per real second
    interruptions_per_node_hour: float = 0.2  # per spot node per virtual hour (Poisson rate)
    # Spot notice before the node goes (AWS gives 2 minutes: docs/gpu-facts.md, Spot and preemption signals)
    notice_s: float = 120.0
    replace_after_s: float = 900.0  # a interrupted spot node's replacement joins this long after it went
    # Drain + MIG Manager + device-plugin restart: minutes (docs/gpu-facts.md, MIG Manager reconfiguration flow)
    mig_reconfigure_s: float = 300.0
    # How long a checkpointed job takes to save on SIGTERM: a save fits in an eviction's grace, or is not made.
    # Half a minute writes a few tens of GB to a shared volume; a notice's grace (scheduler.loop.notice) is longer.
    checkpoint_cost_s: float = 30.0
    # How long a pod takes from its bind to being ready to serve (image pull, loading weights): what a move waits
    # for before it releases the old replicas (ReplicaObservation.ready).
    startup_s: float = 60.0
    # The chance a node request finds no capacity (a stockout) and fails (scheduler.gateways.simulated.autoscaler).
    stockout_probability: float = 0.0
    seed: int | None = None  # fixes the interruption and stockout draws (tests); None: fresh randomness

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> FleetSettings:
        """From ``settings.SCHEDULER``: its ``simulated_*`` keys, e.g. ``simulated_speed``."""
        prefix = "simulated_"
        known = {name for name in cls.__slots__}
        picked = {key[len(prefix) :]: value for key, value in values.items() if key.startswith(prefix)}
        unknown = sorted(set(picked) - known)
        if unknown:
            raise ValueError(f"unknown simulated fleet settings: {', '.join(prefix + k for k in unknown)}")
        return cls(**picked)


class NodeKey(Protocol):
    """What the walk's steps read of a node: a :class:`~scheduler.models.Node` or its :class:`NodeFacts`."""

    @property
    def pk(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def tier(self) -> str: ...


@dataclass(frozen=True, slots=True)
class _Walk:
    """What one walk over the fleet read (:meth:`SimulatedFleet._walk`): the states as it left them."""

    live: list[str]  # the nodes whose MIG reconfiguration went live
    nodes: list[NodeFacts]  # every node, by name
    states: dict[int, SimulatedNodeState]  # node id -> its state (every node has one after the walk)


class _KeptReplica(NamedTuple):
    """A replica the last observation reported, with the pod row and the time-dependent state it was made from."""

    pod: PodRow
    state: tuple[ReplicaPhase, str, bool]
    observed: ReplicaObservation


def _state_values(state: SimulatedNodeState) -> tuple[Any, ...]:
    """A state's columns, ``interruptions_checked_at`` last."""
    return (
        state.notice_at,
        state.gone_at,
        state.back_at,
        state.mig_desired,
        state.mig_since,
        state.mig_ready_at,
        state.interruptions_checked_at,
    )


class SimulatedFleet:
    """A :class:`~scheduler.gateways.protocol.ClusterGateway` over the database inventory (package doc)."""

    name = "simulated"

    def __init__(self, settings: FleetSettings | None = None, *, clock: Callable[[], datetime] = timezone.now) -> None:
        self.settings = settings or FleetSettings()
        self.clock = clock
        self._batch: Batch | None = None
        self._replicas: dict[int, _KeptReplica] = {}  # the last observation's replicas, by id of their pod row

    # -- batches ---------------------------------------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """:class:`~scheduler.gateways.protocol.BatchingGateway`: the operations called inside happen at one
        instant, in one transaction, with the fleet walked once (:mod:`scheduler.gateways.simulated.batch`); each
        keeps its own all-or-nothing (a refused one is undone alone, a savepoint of the batch's transaction). An
        exception that is no :class:`~scheduler.errors.GatewayError` undoes the whole batch. Nested: one batch."""
        if self._batch is not None:
            yield
            return
        self._batch = Batch(now=self.clock())
        try:
            with transaction.atomic():
                yield
        finally:
            self._batch = None

    def _now(self) -> datetime:
        return self._batch.now if self._batch is not None else self.clock()

    def _advance_before(self, now: datetime) -> None:
        """What an operation lets the simulated cloud do first: :meth:`advance`; in a batch, the walk once and
        then only the stopping pods whose processes have exited since (module doc of the batch)."""
        batch = self._batch
        if batch is None or not batch.advanced:
            self.advance(now)
            if batch is not None:
                batch.advanced, batch.exits_due = True, False
                batch.nodes.clear()  # the walk may have changed node states
            return
        if batch.exits_due:
            SimulatedPod.objects.filter(exits_at__lte=now).delete()
            batch.exits_due = False

    # -- time ------------------------------------------------------------------------------------------------

    def _real(self, virtual_s: float) -> timedelta:
        return timedelta(seconds=virtual_s / self.settings.speed)

    def _virtual(self, real: timedelta) -> float:
        return max(real.total_seconds(), 0.0) * self.settings.speed

    def _work_end(self, pod: Pod, now: datetime, gone_at: datetime | None) -> datetime:
        """When the pod stopped working: now, or when its node went, or when it was asked to stop."""
        return min(t for t in (now, gone_at, pod.stop_requested_at) if t is not None)

    def _work_done(self, pod: Pod, now: datetime, gone_at: datetime | None) -> float:
        return pod.work_start_s + self._virtual(self._work_end(pod, now, gone_at) - pod.bound_at)

    # -- what happens by itself ------------------------------------------------------------------------------

    def advance(self, now: datetime | None = None) -> list[str]:
        """Let the simulated cloud act up to ``now``: replacements return, spot notices arrive, MIG reconfigurations
        finish. Idempotent for one ``now``; called by :meth:`observe`. Returns the nodes whose MIG reconfiguration went
        live in this call (the node states are locked, so concurrent callers never both report one)."""
        return self._walk(now or self._now()).live

    def _walk(self, now: datetime) -> _Walk:
        """:meth:`advance`, returning besides what it read: every node's row and state, which :meth:`observe`
        reports from instead of reading them again. A state is written only when it changed; the spot nodes whose
        only change is the time of their interruption draw (every spot node, every cycle, most cycles) are written
        in one statement, and the states of nodes seen for the first time in one insert."""
        live = []
        with transaction.atomic():
            SimulatedPod.objects.filter(exits_at__lte=now).delete()  # stopped pods whose process has exited
            states = {s.node_id: s for s in SimulatedNodeState.objects.select_for_update()}
            nodes = node_facts(Node.objects.order_by("name"))
            created, drawn = [], []
            for node in nodes:
                state = states.get(node.pk)
                if state is None:
                    state = states[node.pk] = SimulatedNodeState(node_id=node.pk)
                    created.append(state)
                before = _state_values(state)
                changed = self._replacement(node, state, now)
                changed |= self._interruption(node, state, now)
                if self._mig_progress(node, state, now):
                    changed = True
                    live.append(node.name)
                if state.pk is None or not changed:
                    continue
                after = _state_values(state)
                if after[:-1] != before[:-1]:
                    state.save()
                elif after != before:  # the draw's time alone (interruptions_checked_at, the last value)
                    drawn.append(state.pk)
            SimulatedNodeState.objects.bulk_create(created)
            if drawn:
                SimulatedNodeState.objects.filter(pk__in=drawn).update(interruptions_checked_at=now)
        return _Walk(live=live, nodes=nodes, states=states)

    def maintain(self) -> tuple[MaintenanceEvent, ...]:
        """:class:`~scheduler.gateways.protocol.MaintainedGateway`. The simulated fleet drains at request time and
        finishes a MIG reconfiguration by itself once its delay has passed, so there is no flow to drive: this lets the
        simulated cloud act now (:meth:`advance`) and reports the MIG reconfigurations that went live in doing so."""
        return tuple(MaintenanceEvent(node=name, step="mig-live") for name in self.advance())

    def _replacement(self, node: NodeKey, state: SimulatedNodeState, now: datetime) -> bool:
        if state.back_at is None or state.back_at > now:
            return False
        # A fresh machine: whatever the scheduler did not clean up went down with the old one.
        SimulatedPod.objects.filter(node_id=node.pk).delete()
        state.notice_at = state.gone_at = state.back_at = None
        state.interruptions_checked_at = now
        return True

    def _interruption(self, node: NodeKey, state: SimulatedNodeState, now: datetime) -> bool:
        rate = self.settings.interruptions_per_node_hour
        if node.tier != CapacityTier.SPOT or rate <= 0 or state.notice_at is not None:
            return False
        previous = state.interruptions_checked_at
        state.interruptions_checked_at = now
        if previous is None:
            return True  # the rate counts from the first look, not from the node's creation
        hours = self._virtual(now - previous) / 3600
        if hours <= 0:
            return previous != now
        seed = None if self.settings.seed is None else f"{self.settings.seed}:{node.name}:{now.timestamp()}"
        if random.Random(seed).random() < 1 - math.exp(-rate * hours):
            state.notice_at = now
            state.gone_at = now + self._real(self.settings.notice_s)
            state.back_at = state.gone_at + self._real(self.settings.replace_after_s)
        return True

    def notice_give(self, *, node: str, notice_s: float | None = None) -> datetime:
        """The simulated cloud reclaims ``node`` now, as its random draws would: a notice of ``notice_s`` virtual
        seconds (default: the fleet's ``notice_s``), then the node goes, and a replacement joins
        ``replace_after_s`` later. Returns when the node goes. For demos and tests that need a reclaim at a
        chosen moment; raises :class:`~scheduler.errors.GatewayConflict` for a node not in the fleet or one under
        a notice already."""
        now = self._now()
        self._advance_before(now)
        if self._batch is not None:
            self._batch.forget(node)
        with transaction.atomic():
            row = self._open_or_cordoned(node, now)
            state, _ = SimulatedNodeState.objects.select_for_update().get_or_create(node=row)
            if state.notice_at is not None:
                raise GatewayConflict(f"node {node} is under a notice already (since {state.notice_at:%H:%M:%S})")
            state.notice_at = now
            state.gone_at = now + self._real(self.settings.notice_s if notice_s is None else notice_s)
            state.back_at = state.gone_at + self._real(self.settings.replace_after_s)
            state.save()
            return state.gone_at

    def _mig_progress(self, node: NodeKey, state: SimulatedNodeState, now: datetime) -> bool:
        if state.mig_desired is None or state.mig_ready_at is None or state.mig_ready_at > now:
            return False
        for gpu in Gpu.objects.filter(node_id=node.pk):
            wanted = state.mig_desired[gpu.index] if gpu.index < len(state.mig_desired) else []
            if gpu.mig_layout != wanted:
                gpu.mig_layout = wanted
                gpu.save(update_fields=["mig_layout"])
        state.mig_desired = state.mig_since = state.mig_ready_at = None
        return True

    # -- observe ---------------------------------------------------------------------------------------------

    def observe(self) -> Observation:
        """The fleet after :meth:`advance`, from the rows its walk read (nodes, their states) and the GPUs' layouts
        read after it (a reconfiguration may have gone live in it)."""
        now = self.clock()
        requests = requests_advance(now)  # first: the nodes a request brings join the walk below
        walk = self._walk(now)
        layouts = gpu_layouts()
        nodes = []
        gone: dict[int, datetime] = {}
        for node in walk.nodes:
            state = walk.states.get(node.pk)
            if state is not None and state.gone_at is not None and state.gone_at <= now:
                gone[node.pk] = state.gone_at
                continue
            nodes.append(self._node(node, layouts.get(node.pk, {}), state, now))
        return Observation(
            observed_at=now.timestamp(),
            nodes=tuple(nodes),
            jobs=self._jobs(now, gone),
            clock_speed=self.settings.speed,
            node_requests=request_observations(requests),
        )

    def _node(
        self, node: NodeFacts, layouts: Mapping[int, Any], state: SimulatedNodeState | None, now: datetime
    ) -> NodeObservation:
        interruption = None
        mig_status = MigStatus()
        if state is not None and state.notice_at is not None:
            interruption = Interruption(
                noticed_at=state.notice_at.timestamp(),
                deadline_at=state.gone_at.timestamp() if state.gone_at else None,
                source="simulated-spot",
            )
        if state is not None and state.mig_desired is not None and state.mig_ready_at is not None:
            mig_status = MigStatus(
                state=MigConfigState.PENDING,
                desired=tuple(_layout(layout) for layout in state.mig_desired),
                since=state.mig_since.timestamp() if state.mig_since else None,
                ready_at=state.mig_ready_at.timestamp(),
            )
        # An admin's cordon or drain is the cluster's cordon here (``kubectl drain`` cordons first); the gateway's
        # own node states are derived. The simulated cluster has the fabric the inventory says: a sync keeps it
        # instead of erasing it.
        schedulable = interruption is None and not node.held_closed
        return node_observation(
            node, layouts, schedulable=schedulable, interruption=interruption, mig_status=mig_status
        )

    def _jobs(self, now: datetime, gone: Mapping[int, datetime]) -> dict[str, JobObservation]:
        by_job: dict[int, list[PodRow]] = {}
        for pod in pod_rows():
            by_job.setdefault(pod.job_id, []).append(pod)
        # The jobs with pods, as a subquery: thousands of ids as parameters cost more to pass than the rows to read.
        with_pods = SimulatedProgress.objects.filter(job_id__in=SimulatedPod.objects.values("job_id"))
        progress = {p.job_id: p for p in with_pods} if by_job else {}
        result = {}
        kept, self._replicas = self._replicas, {}
        for job_id, pods in by_job.items():
            replicas = tuple(self._replica_kept(pod, now, gone.get(pod.node_id), kept) for pod in pods)
            first = pods[0]
            checkpoint = self._last_checkpoint(first, now, gone.get(first.node_id), progress.get(job_id))
            result[str(job_id)] = JobObservation(
                job=str(job_id),
                namespace=first.namespace,
                replicas=replicas,
                last_checkpoint_at=checkpoint.at.timestamp() if checkpoint else None,
                last_checkpoint_step=checkpoint.step if checkpoint else None,
                last_checkpoint_path=checkpoint.path if checkpoint else "",
            )
        return result

    def _replica_kept(
        self, pod: PodRow, now: datetime, gone_at: datetime | None, kept: Mapping[int, _KeptReplica]
    ) -> ReplicaObservation:
        """:meth:`_replica`, the last observation's object when it was made from this same pod row (the pod rows
        are kept between reads: :func:`~scheduler.gateways.simulated.pods.pod_rows`) with the same phase, message
        and readiness, which is all of it that depends on the time (most pods, most observations)."""
        state = self._replica_state(pod, now, gone_at)
        entry = kept.get(id(pod))
        if entry is None or entry.pod is not pod or entry.state != state:
            # The entry keeps the pod alive: ids stay its. An unchanged one is kept as it is, so the observation
            # leaves no new object behind for it (the collector's pass after the cycle walks only what changed).
            entry = _KeptReplica(pod, state, self._replica(pod, *state))
        self._replicas[id(pod)] = entry
        return entry.observed

    def _replica_state(self, pod: PodRow, now: datetime, gone_at: datetime | None) -> tuple[ReplicaPhase, str, bool]:
        """The replica's phase, its message and whether it is ready, at ``now``."""
        if gone_at is not None:
            phase, message = ReplicaPhase.GONE, f"node {pod.node_name} was interrupted"
        elif pod.stop_requested_at is not None:
            phase, message = ReplicaPhase.STOPPING, "asked to stop: saving a checkpoint within its grace"
        elif pod.duration_s is not None and self._work_done(pod, now, None) >= pod.duration_s:
            phase, message = ReplicaPhase.SUCCEEDED, ""
        else:
            phase, message = ReplicaPhase.RUNNING, ""
        ready = phase == ReplicaPhase.RUNNING and now >= pod.bound_at + self._real(self.settings.startup_s)
        return phase, message, ready

    def _replica(self, pod: PodRow, phase: ReplicaPhase, message: str, ready: bool) -> ReplicaObservation:
        return ReplicaObservation(
            replica=pod.replica,
            phase=phase,
            node=pod.node_name,
            devices=_devices(pod.devices),
            message=message,
            generation=pod.generation,
            ready=ready,
        )

    def _last_checkpoint(
        self, pod: Pod, now: datetime, gone_at: datetime | None, progress: SimulatedProgress | None
    ) -> SimulatedCheckpoint | None:
        """The job's (its first replica's) newest checkpoint of this run: its last periodic save, or the save it
        made on SIGTERM (``progress``, when it is from this run). A pod saves nothing after its node went or after
        it was asked to stop. Its step is the whole virtual seconds of work it holds (module doc of
        :mod:`scheduler.gateways.simulated`)."""
        interval = pod.checkpoint_interval_s
        if not interval:
            return None
        latest = None
        done = self._virtual(self._work_end(pod, now, gone_at) - pod.bound_at)
        if pod.duration_s is not None:
            done = min(done, max(pod.duration_s - pod.work_start_s, 0.0))
        saves = math.floor(done / interval)
        if saves >= 1:
            latest = checkpoint_of(
                pod, pod.bound_at + self._real(saves * interval), pod.work_start_s + saves * interval
            )
        on_sigterm = self._saved_this_run(pod, progress)
        if on_sigterm is not None and (latest is None or on_sigterm.at > latest.at):
            latest = on_sigterm
        return latest

    def _saved_this_run(self, pod: Pod, progress: SimulatedProgress | None) -> SimulatedCheckpoint | None:
        """The save the pod's run made on SIGTERM, if any: saved progress stamped since the pod was bound."""
        if progress is None or progress.checkpointed_at is None or progress.checkpointed_at < pod.bound_at:
            return None
        return checkpoint_of(pod, progress.checkpointed_at, progress.saved_work_s)

    # -- apply -----------------------------------------------------------------------------------------------

    def namespace_ensure(self, *, namespace: str, team: str, checkpoint_claim: str = "") -> None:
        """Namespaces cost nothing on the simulated fleet: pods carry theirs. Always succeeds."""

    def job_bind(self, *, request: BindRequest) -> None:
        self._start(request, generation=0)

    def job_move(self, *, request: BindRequest, generation: int) -> None:
        """The job's replicas again on the request's placement as pods of ``generation``, beside the running ones
        (:meth:`~scheduler.gateways.protocol.ClusterGateway.job_move`); ready after ``startup_s``."""
        if generation < 1:
            raise GatewayConflict(f"job {request.job}: a move starts a generation above 0, not {generation}")
        self._start(request, generation=generation)

    def _start(self, request: BindRequest, *, generation: int) -> None:
        """Create the missing pods of ``generation`` on the request's placement: all of them or none (one
        transaction). A bind (generation 0) first clears the job's previous run still stopping; a move keeps
        the older generations running, and their devices count as held."""
        now = self._now()
        self._advance_before(now)
        with transaction.atomic():
            pods = list(SimulatedPod.objects.select_for_update().filter(job_id=int(request.job)))
            progress = SimulatedProgress.objects.filter(job_id=int(request.job)).first()
            stopping, new = self._start_pods(request, generation, pods, progress, now, on_node=self._pods_on)
            SimulatedPod.objects.filter(pk__in=[pod.pk for pod in stopping]).delete()
            SimulatedPod.objects.bulk_create(new)

    def jobs_bind(self, *, requests: Sequence[BindRequest]) -> dict[str, str]:
        """:class:`~scheduler.gateways.protocol.BindingManyGateway`: each request as :meth:`job_bind` would apply it
        after the ones before it, with the reads and writes of all of them shared
        (:mod:`scheduler.gateways.simulated.binds`); returns why each refused request was refused, by job. A refused
        one leaves nothing behind; the others stand."""
        now = self._now()
        self._advance_before(now)
        with transaction.atomic():
            if self._batch is not None:
                self._batch.nodes_read({p.node for request in requests for p in request.placements})
            view = BindView.read(requests)
            refused: dict[str, str] = {}
            for request in requests:
                job = int(request.job)
                try:
                    stopping, new = self._start_pods(
                        request, 0, view.pods_of(job), view.progress.get(job), now, on_node=view.pods_on
                    )
                except GatewayConflict as exc:
                    refused[request.job] = str(exc)
                    continue
                view.started(job, stopping, new)
            view.write()
        return refused

    def _start_pods(
        self,
        request: BindRequest,
        generation: int,
        pods: list[SimulatedPod],
        progress: SimulatedProgress | None,
        now: datetime,
        *,
        on_node: Callable[[Node], Iterable[SimulatedPod]],
    ) -> tuple[list[SimulatedPod], list[SimulatedPod]]:
        """What starting ``request``'s pods of ``generation`` takes (:meth:`_start`), or
        :class:`~scheduler.errors.GatewayConflict`: the job's stopping pods to remove and the pods to create
        (not saved). ``pods``: the job's pods; ``progress``: its saved work; ``on_node``: every job's pods on a
        node."""
        stopping: list[SimulatedPod] = []
        if generation == 0:
            # The job's previous run, still stopping, is over: its processes make way for the new ones.
            stopping = [pod for pod in pods if pod.stop_requested_at is not None]
            pods = [pod for pod in pods if pod.stop_requested_at is None]
        existing = {p.replica: p for p in pods if p.generation == generation}
        wanted = sorted(p.replica for p in request.placements)
        if wanted != list(range(len(request.placements))):
            raise GatewayConflict(f"job {request.job}: replicas must be numbered 0..n-1, got {wanted}")
        extra = sorted(set(existing) - set(wanted))
        if extra:
            raise GatewayConflict(f"job {request.job} has replicas {extra} the request does not name")
        work_start = progress.saved_work_s if progress else 0.0
        own = [pod for pod in pods if pod.generation != generation]
        new = []
        for placement in sorted(request.placements, key=lambda p: p.replica):
            devices = _device_rows(placement.devices)
            pod = existing.get(placement.replica)
            if pod is not None:
                if pod.node.name != placement.node or pod.devices != devices:
                    raise GatewayConflict(
                        f"job {request.job} replica {placement.replica} is already on {pod.node.name} "
                        f"{pod.devices}, not {placement.node} {devices}"
                    )
                continue
            node = self._open_node(placement.node, now)
            self._check_devices(node, request.job, placement.devices, own=own, on_node=on_node(node))
            new.append(
                SimulatedPod(
                    job_id=int(request.job),
                    replica=placement.replica,
                    generation=generation,
                    node=node,
                    devices=devices,
                    namespace=request.namespace,
                    bound_at=now,
                    work_start_s=work_start,
                    duration_s=request.duration_s,
                    checkpoint_interval_s=request.checkpoint_interval_s,
                    checkpoint_dir=request.checkpoint_dir,
                )
            )
        return stopping, new

    @staticmethod
    def _pods_on(node: Node) -> list[SimulatedPod]:
        return list(SimulatedPod.objects.filter(node=node))

    def job_release(self, *, job: str, namespace: str, generation: int, grace_s: float) -> None:
        """A move is complete: the pods of older generations go at once (a server that checkpoints nothing
        has nothing to save), the new ones keep serving."""
        SimulatedPod.objects.filter(job_id=int(job), generation__lt=generation).delete()

    def job_move_abandon(self, *, job: str, namespace: str, generation: int, grace_s: float) -> None:
        """A move is given up: the pods of ``generation`` and newer go, the older ones keep serving."""
        SimulatedPod.objects.filter(job_id=int(job), generation__gte=generation).delete()

    def _node_and_state(self, name: str) -> tuple[Node | None, SimulatedNodeState | None]:
        if self._batch is not None:
            return self._batch.node(name)
        node = Node.objects.select_related("gpu_model").filter(name=name).first()
        return node, SimulatedNodeState.objects.filter(node__name=name).first()

    def _open_node(self, name: str, now: datetime) -> Node:
        node, state = self._node_and_state(name)
        if node is None or (state is not None and state.gone_at is not None and state.gone_at <= now):
            raise GatewayConflict(f"node {name} is not in the fleet")
        if node.held_closed or (state is not None and state.notice_at is not None):
            raise GatewayConflict(f"node {name} takes no new work (cordoned, draining or under an interruption notice)")
        if state is not None and state.mig_ready_at is not None:
            raise GatewayConflict(f"node {name} is changing its MIG layout until {state.mig_ready_at:%H:%M:%S}")
        return node

    def _check_devices(
        self,
        node: Node,
        job: str,
        devices: Iterable[Device],
        *,
        own: Iterable[SimulatedPod] = (),
        on_node: Iterable[SimulatedPod],
    ) -> None:
        """Refuse a device that does not exist or is held: by another job (``on_node``: the pods on the node,
        every job's), or by ``own`` (the job's replicas of another generation, which a move runs beside)."""
        layouts = {gpu.index: _layout(gpu.mig_layout) for gpu in node.gpus.all()}
        held: set[tuple[int, int | None]] = set()
        others = [pod for pod in on_node if pod.job_id != int(job)]
        for pod in [*others, *own]:
            if pod.node_id != node.pk:
                continue
            held.update((gpu, start) for gpu, _profile, start in pod.devices)
        for device in devices:
            where = f"{node.name} GPU {device.gpu}"
            if device.gpu not in layouts:
                raise GatewayConflict(f"{where} does not exist")
            device_check(where, device, layouts[device.gpu], held)

    def job_evict(self, *, job: str, namespace: str, grace_s: float, reason: str) -> None:
        """Stop the job's pods. On a node under a spot notice or drained by an admin, with a grace, they get SIGTERM
        and stay ``stopping`` while a checkpointed job saves (:meth:`_stop`); otherwise they go at once, keeping the
        work up to their last periodic checkpoint. Pods already stopping are left to finish."""
        now = self._now()
        with transaction.atomic():
            pods = list(SimulatedPod.objects.select_for_update().filter(job_id=int(job)).order_by("replica"))
            if not pods or all(pod.stop_requested_at is not None for pod in pods):
                return
            if reason in ("completed", "cancelled", "failed"):
                SimulatedProgress.objects.filter(job_id=int(job)).delete()
            else:
                deadline = self._notice_deadline(pods, now)
                if grace_s > 0 and deadline is not None:
                    self._stop(pods, now, grace_s=grace_s, deadline=deadline)
                    return
                self._save_progress(pods[0], now)
            SimulatedPod.objects.filter(pk__in=[p.pk for p in pods]).delete()

    def _notice_deadline(self, pods: Iterable[SimulatedPod], now: datetime) -> datetime | None:
        """When the first of the pods' nodes under a notice goes (None: no pod is on such a node). A node an admin
        drains does not go: its pods may use all of their grace (``datetime.max``), as the kubelet gives a pod
        deleted by ``kubectl drain`` its SIGTERM and then its whole termination grace period."""
        node_ids = {pod.node_id for pod in pods}
        states = SimulatedNodeState.objects.filter(node_id__in=node_ids, notice_at__isnull=False, gone_at__gt=now)
        deadline = min((state.gone_at for state in states if state.gone_at is not None), default=None)
        if deadline is None and any(node.held_closed for node in Node.objects.filter(pk__in=node_ids)):
            return datetime.max.replace(tzinfo=now.tzinfo)
        return deadline

    def _stop(self, pods: list[SimulatedPod], now: datetime, *, grace_s: float, deadline: datetime) -> None:
        """SIGTERM on a notice: a checkpointed job saves its work as of now if the save (``checkpoint_cost_s``)
        ends within the grace and before the node goes, records it as the job's own report would be
        (``jobs.services.checkpoint_record``, source ``simulated``), and exits once saved; one that cannot save
        keeps its last periodic checkpoint and is killed at the end of its grace; one without checkpoints exits
        at once."""
        first = pods[0]
        grace = timedelta(seconds=grace_s)
        cost = self._real(self.settings.checkpoint_cost_s)
        if not first.checkpoint_interval_s:
            exits_at = now
        elif cost <= grace and now + cost <= deadline:
            work = self._work_done(first, now, None)
            if first.duration_s is not None:
                work = min(work, first.duration_s)
            SimulatedProgress.objects.update_or_create(
                job_id=first.job_id, defaults={"saved_work_s": work, "checkpointed_at": now}
            )
            checkpoint_report(first, checkpoint_of(first, now, work), cost_s=self.settings.checkpoint_cost_s, now=now)
            exits_at = now + cost
        else:
            self._save_progress(first, now)
            exits_at = now + grace
        SimulatedPod.objects.filter(pk__in=[pod.pk for pod in pods]).update(stop_requested_at=now, exits_at=exits_at)
        if self._batch is not None and exits_at <= now:
            self._batch.exits_due = True  # one by one, the next operation's advance would remove them

    def _save_progress(self, pod: SimulatedPod, now: datetime) -> None:
        """What an evicted job keeps: its work up to its last checkpoint (none without checkpoints)."""
        state = SimulatedNodeState.objects.filter(node_id=pod.node_id).first()
        gone_at = state.gone_at if state is not None and state.gone_at and state.gone_at <= now else None
        ran = self._work_done(pod, now, gone_at) - pod.work_start_s
        interval = pod.checkpoint_interval_s
        saved_run = math.floor(ran / interval) * interval if interval else 0.0
        if saved_run <= 0:
            return
        total = pod.work_start_s + saved_run
        if pod.duration_s is not None:
            total = min(total, pod.duration_s)
        SimulatedProgress.objects.update_or_create(
            job_id=pod.job_id,
            defaults={"saved_work_s": total, "checkpointed_at": pod.bound_at + self._real(saved_run)},
        )

    def node_cordon(self, *, node: str, cordoned: bool) -> None:
        """A no-op: an admin's cordon or drain in the inventory is this cluster's cordon (:meth:`_node`)."""

    def node_reconfigure(self, *, node: str, layouts: tuple[MigLayout, ...]) -> None:
        now = self._now()
        self._advance_before(now)
        if self._batch is not None:
            self._batch.forget(node)
        with transaction.atomic():
            row = self._open_or_cordoned(node, now)
            if len(layouts) > row.gpu_count:
                raise GatewayConflict(f"{node} has {row.gpu_count} GPUs, the request names {len(layouts)}")
            desired: list[list[list[Any]]] = []
            for index in range(row.gpu_count):
                layout = layouts[index] if index < len(layouts) else ()
                try:
                    desired.append([[p, s] for p, s in validate_layout(row.gpu_model.name, layout)])
                except LayoutError as exc:
                    raise GatewayConflict(f"{node} GPU {index}: {exc}") from None
            state, _ = SimulatedNodeState.objects.select_for_update().get_or_create(node=row)
            current = {gpu.index: gpu.mig_layout for gpu in row.gpus.all()}
            if state.mig_desired == desired or (
                state.mig_desired is None and all(current.get(i, []) == d for i, d in enumerate(desired))
            ):
                return
            changing = {i for i, d in enumerate(desired) if current.get(i, []) != d}
            # mig-parted destroys every instance of a GPU it changes: drain what is still on those GPUs.
            for pod in SimulatedPod.objects.filter(node=row):
                if any(gpu in changing for gpu, _p, _s in pod.devices):
                    self._save_progress(pod, now)
                    SimulatedPod.objects.filter(job_id=pod.job_id).delete()
            state.mig_desired = desired
            state.mig_since = now
            state.mig_ready_at = now + self._real(self.settings.mig_reconfigure_s)
            state.save()
        self._advance_after(row, now)  # a zero delay applies at once

    def _advance_after(self, row: Node, now: datetime) -> None:
        """After a reconfiguration of ``row``: :meth:`advance`; in a batch, only what the change can make due at
        the batch's instant, the change itself (the rest of the fleet was walked at this instant already)."""
        if self._batch is None:
            self.advance(now)
            return
        self._batch.forget(row.name)
        if self._batch.exits_due:
            SimulatedPod.objects.filter(exits_at__lte=now).delete()
            self._batch.exits_due = False
        with transaction.atomic():
            state = SimulatedNodeState.objects.select_for_update().get(node=row)
            if self._mig_progress(row, state, now):
                state.save()

    def _open_or_cordoned(self, name: str, now: datetime) -> Node:
        node, state = self._node_and_state(name)
        if node is None or (state is not None and state.gone_at is not None and state.gone_at <= now):
            raise GatewayConflict(f"node {name} is not in the fleet")
        return node

    # -- the autoscaler (scheduler.gateways.simulated.autoscaler) --------------------------------------------

    def nodes_request(self, *, request: NodeRequestSpec) -> None:
        """:class:`~scheduler.gateways.protocol.ProvisioningGateway`: hold the request; its nodes join after the
        pool's arrival time, all or none."""
        request_hold(
            request,
            now=self._now(),
            real=self._real,
            stockout_probability=self.settings.stockout_probability,
            seed=self.settings.seed,
        )

    def nodes_request_withdraw(self, *, request: str, namespace: str) -> None:
        request_forget(request)

    def node_release(self, *, node: str) -> None:
        if self._batch is not None:
            self._batch.forget(node)
        node_remove(node, now=self._now())

    # -- logs ------------------------------------------------------------------------------------------------

    def job_logs(
        self, *, job: str, namespace: str, replica: int, tail_lines: int, limit_bytes: int = LOG_LIMIT_BYTES
    ) -> ReplicaLog:
        """The replica's lifecycle lines (:mod:`scheduler.gateways.simulated.lifecycle`): this fleet runs no
        container, so it has no output of its own to give. A job id that is no number names no job here."""
        try:
            job_id = int(job)
        except ValueError:
            job_id = None
        lines = replica_lifecycle(job_id=job_id, replica=replica) if job_id is not None else []
        kept = [line.render() for line in lines[-max(tail_lines, 1) :]]
        text = "".join(f"{line}\n" for line in kept)
        limit = max(1, min(limit_bytes, LOG_LIMIT_BYTES))
        encoded = text.encode("utf-8")
        truncated = len(encoded) > limit
        if truncated:  # as the API server does: the first bytes of the tail, perhaps mid-line
            text = encoded[:limit].decode("utf-8", errors="ignore")
        note = "" if lines else f"replica {replica} of job {job} has not been bound to a node yet"
        return ReplicaLog(replica=replica, text=text, source=LogSource.SIMULATED, truncated=truncated, note=note)

    # -- utilization -----------------------------------------------------------------------------------------

    def utilization(self) -> tuple[UtilizationReading, ...]:
        now = self.clock()
        observation = self.observe()
        kinds = dict(
            SimulatedPod.objects.values_list("job_id", "job__kind").distinct()  # one kind per job
        )
        held: dict[str, tuple[float, float]] = {}
        models = {node.name: node.gpu_model for node in observation.nodes}
        for job in observation.jobs.values():
            activity = _ACTIVITY.get(JobKind(kinds.get(int(job.job), JobKind.TRAINING)), 0.8)
            # A little jitter per job and minute, so the graphs look like a fleet and not a ruler.
            jitter = random.Random(f"{job.job}:{int(now.timestamp() // 60)}").uniform(-0.08, 0.08)
            for replica in job.replicas:
                if replica.phase != ReplicaPhase.RUNNING or replica.node not in models:
                    continue
                units = sum(
                    compute_fraction(models[replica.node], d.mig_profile) if d.mig_profile else 1.0
                    for d in replica.devices
                )
                allocated, busy = held.get(replica.node, (0.0, 0.0))
                held[replica.node] = (allocated + units, busy + units * min(max(activity + jitter, 0.0), 1.0))
        gpu_classes = dict(Node.objects.values_list("name", "gpu_model__gpu_class"))
        readings = []
        for node in observation.nodes:
            allocated, busy = held.get(node.name, (0.0, 0.0))
            readings.append(
                UtilizationReading(
                    node=node.name,
                    gpu_class=gpu_classes.get(node.name, ""),
                    gpus=float(node.gpu_count),
                    allocated_gpus=round(allocated, 6),
                    busy_ratio=round(min(busy / node.gpu_count, 1.0), 6),
                )
            )
        return tuple(readings)


def _layout(stored: Iterable[Iterable[Any]]) -> MigLayout:
    return tuple((str(profile), int(start)) for profile, start in stored)


def _device_rows(devices: Iterable[Device]) -> list[list[Any]]:
    return [[d.gpu, d.mig_profile, d.mig_start] for d in devices]


def _devices(rows: Iterable[Iterable[Any]]) -> tuple[Device, ...]:
    return tuple(Device(gpu=gpu, mig_profile=profile, mig_start=start) for gpu, profile, start in rows)
