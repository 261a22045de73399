"""What the replay remembers about each job and node between cycles, and how work is counted.

Work model (the simulator's rules, stated once):

- A running job does ``rate`` seconds of work per second of its run. The rate is 1 unless the replay is
  given a speed hook (``replay(..., speed=...)``, e.g. :func:`scheduler.sim.topology_model.topology_speed`),
  which sets it from the job's placement when it binds; it completes once ``duration_s`` of work is done.
  A job without ``duration_s`` runs
  until it is cancelled, finished or the run ends.
- Work is durable only up to the job's last checkpoint. A checkpoint happens automatically every
  ``checkpoint_interval_s`` of running time since the run started or since the previous checkpoint (a
  ``checkpoint`` event forces one and restarts that clock). A job without checkpoints keeps nothing of a run
  that is cut short.
- When a job is preempted or its node is lost, the work since its last checkpoint is lost and it goes back
  to the queue; the next run resumes from the checkpointed work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.gpus.catalog import COMPUTE_SLICES, GPU_MODEL_BY_NAME
from scheduler.core.gpus.units import UNITS_PER_GPU
from scheduler.core.model.cluster_state import ClusterState, Gpu, slot_units
from scheduler.core.model.snapshot import Job, Node, Running, Slots
from scheduler.core.model.vocabulary import JobState, NodeState
from scheduler.sim.avoidable import Verdict

EPSILON_S = 1e-9  # float slack when comparing work done with a duration


@dataclass(slots=True)
class JobRecord:
    job: Job
    order: int  # submission order: the order jobs are listed in observations
    state: JobState = JobState.PENDING
    slots: Slots = ()
    run_started: float | None = None
    checkpoint_at: float | None = None  # last checkpoint within the current run
    saved_s: float = 0.0  # work that survives a preemption
    run_id: int = 0  # bumps on every bind and every checkpoint: stale timers are ignored
    preemptions: int = 0
    reason: str | None = None
    queue_position: int | None = None
    eta_at: float | None = None  # when the engine expects the job to start (its eta_s from that cycle)
    gpu_equivalents: float = 0.0  # held while running
    price_per_hour: float = 0.0  # Σ GPU-equivalents × node price while running
    rate: float = 1.0  # work seconds per second of the current run (the speed hook's answer at bind)

    @property
    def anchor(self) -> float:
        """Since when the current run's work is at risk (its start or its last checkpoint)."""
        assert self.run_started is not None
        return self.checkpoint_at if self.checkpoint_at is not None else self.run_started

    def work_done(self, now: float) -> float:
        if self.state == JobState.RUNNING:
            return self.saved_s + (now - self.anchor) * self.rate
        return self.saved_s

    def completes_at(self) -> float | None:
        if self.job.duration_s is None or self.state != JobState.RUNNING:
            return None
        return self.anchor + max(0.0, self.job.duration_s - self.saved_s) / self.rate

    def next_checkpoint_at(self) -> float | None:
        interval = self.job.checkpoint_interval_s
        if interval is None or self.state != JobState.RUNNING:
            return None
        return self.anchor + interval

    def running(self) -> Running:
        assert self.run_started is not None
        return Running(
            job=self.job, slots=self.slots, started_at=self.run_started, last_checkpoint_at=self.checkpoint_at
        )


@dataclass(frozen=True, slots=True)
class RunLog:
    """One run of a job, from its bind to its end, for metrics computed after the replay (``sim.metrics``).

    ``outcome``: ``completed`` | ``cancelled`` (both keep their work), ``evicted`` (``lost_s`` wall seconds
    of work at ``rate`` were thrown away: the time since the last checkpoint) or ``running`` (still going
    when the replay ended). ``reason``: an eviction's reason as the plan's ``Evict`` gave it (``priority``,
    ``production``, ``reclaim``, ``repartition``) or the replay's own ``node-lost``; None for other outcomes.
    """

    job: Job
    slots: Slots
    start: float
    end: float
    rate: float
    outcome: str
    lost_s: float = 0.0
    reason: str | None = None


@dataclass(slots=True)
class NodeRecord:
    node: Node
    state: NodeState = NodeState.READY  # draining: a spot notice came; gone: the node left
    gone_at: float | None = None
    reconfiguring: dict[int, float] = field(default_factory=dict)  # GPU → when its new layout is ready

    @property
    def present(self) -> bool:
        return self.state != NodeState.GONE

    def status(self, now: float) -> str:
        if self.state == NodeState.READY and any(ready_at > now for ready_at in self.reconfiguring.values()):
            return "reconfiguring"
        return self.state


def gpu_equivalents(slots: Slots, nodes: dict[str, NodeRecord]) -> tuple[float, float]:
    """(GPU-equivalents held, their price per hour): a whole GPU 1, a MIG slice compute/7, a share milli/1000."""
    total = 0.0
    price = 0.0
    for replica in slots:
        for slot in replica:
            node = nodes[slot.node].node
            share = slot_units(slot, GPU_MODEL_BY_NAME.get(node.gpu_model)) / UNITS_PER_GPU
            total += share
            price += share * node.price_per_gpu_hour
    return total, price


@dataclass(slots=True)
class Ledger:
    """Integrals over the run, in GPU-seconds (GPU-equivalent-seconds for allocations)."""

    capacity_gpu_s: float = 0.0
    allocated_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    cost: float = 0.0
    completed: int = 0
    capacity_gpus: int = 0  # GPUs of the nodes present now
    since: float = 0.0  # capacity is integrated up to here

    def advance(self, now: float) -> None:
        self.capacity_gpu_s += self.capacity_gpus * (now - self.since)
        self.since = now

    def close_run(self, record: JobRecord, now: float, *, lost: bool) -> None:
        """Account for a run that ends at ``now``; ``lost``: the work since the last checkpoint is lost."""
        assert record.run_started is not None
        ran = now - record.run_started
        self.allocated_gpu_s += record.gpu_equivalents * ran
        self.cost += record.price_per_hour * ran / 3600.0
        if lost:
            self.lost_gpu_s += record.gpu_equivalents * (now - record.anchor)

    def metrics(self, running: list[JobRecord], now: float) -> dict[str, float | int]:
        """The spec's metrics at ``now``, counting the runs still going as if they ended there.

        - ``allocation_ratio``: allocated GPU-equivalent-seconds / GPU-seconds of capacity present.
        - ``effective_utilization``: the same with work later lost to preemption or node loss taken out.
        - ``lost_gpu_hours``: GPU-equivalent-hours of work thrown away by preemptions and node losses.
        - ``cost``: Σ GPU-equivalent-hours allocated × the node's ``price_per_gpu_hour`` (lost work included).
        """
        allocated, cost = self.allocated_gpu_s, self.cost
        for record in running:
            assert record.run_started is not None
            allocated += record.gpu_equivalents * (now - record.run_started)
            cost += record.price_per_hour * (now - record.run_started) / 3600.0
        capacity = self.capacity_gpu_s
        return {
            "allocation_ratio": round(allocated / capacity, 6) if capacity else 0.0,
            "effective_utilization": round((allocated - self.lost_gpu_s) / capacity, 6) if capacity else 0.0,
            "completed": self.completed,
            "lost_gpu_hours": round(self.lost_gpu_s / 3600.0, 6),
            "cost": round(cost, 6),
        }


@dataclass(frozen=True, slots=True)
class CycleSample:
    """The cluster as one cycle's plan left it: the free share of every GPU of each node that takes new work
    (ready, not being reconfigured), and the jobs still pending, in submission order."""

    t: float
    free: tuple[tuple[str, tuple[float, ...]], ...]  # node → per GPU, 1 − (GPU-equivalents held on it)
    pending: tuple[Job, ...]


@dataclass
class CycleLog:
    """What the replay records per cycle when asked (``replay(..., cycles=CycleLog(...))``), for the metrics
    that need the queue over time (``sim.idle_pending``, ``sim.eta_error``); off by default, so scenario
    replays pay nothing for it.

    - ``samples``: one :class:`CycleSample` per cycle whose time falls in ``window`` (every cycle when None); none
      when ``sampling`` is off (B4 reads only the verdicts, and a sample of every GPU per cycle is not free).
    - ``verdicts``: from the window's start on (no end: a wait may outlast the window), for every cycle that
      left production work pending, each such job's :class:`~scheduler.sim.avoidable.Verdict` on the cluster as
      the plan left it (:func:`scheduler.sim.avoidable.judge_pending`), as ``(t, ((job, verdict), …))``.
    - ``etas``: per job, the changes of its predicted start as ``(t, predicted start or None)``: the plan's
      ``Waiting.eta_s`` added to the cycle's time, None when that cycle gave no estimate. A step function:
      the prediction at time τ is the last entry at or before τ.
    """

    window: tuple[float, float] | None = None
    samples: list[CycleSample] = field(default_factory=list)
    etas: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    verdicts: list[tuple[float, tuple[tuple[str, Verdict], ...]]] = field(default_factory=list)
    sampling: bool = True

    def wants(self, t: float) -> bool:
        """Whether the cycle at ``t`` records a :class:`CycleSample`."""
        return self.sampling and (self.window is None or self.window[0] <= t < self.window[1])

    def judges(self, t: float) -> bool:
        """Whether the cycle at ``t`` records production's verdicts: from the window's start on."""
        return self.window is None or self.window[0] <= t

    def eta(self, job: str, t: float, predicted: float | None) -> None:
        history = self.etas.setdefault(job, [])
        if not history or history[-1][1] != predicted:
            history.append((t, predicted))


def free_share(gpu: Gpu) -> float:
    """1 − the share of ``gpu`` held: a whole-GPU holder takes it all, a MIG instance its compute slices / 7
    (of the layout as it now is), a share its milli / 1000."""
    if gpu.idle:
        return 1.0
    if gpu.whole is not None:
        return 0.0
    held = sum(share for share in gpu.shares.values()) / 1000.0
    if gpu.instances and gpu.spec is not None:
        profiles = gpu.spec.profiles()
        held += sum(profiles[name].compute_slices for name, start in gpu.layout if start in gpu.instances) / (
            COMPUTE_SLICES
        )
    return max(0.0, 1.0 - held)


def sample(now: float, nodes: Mapping[str, NodeRecord], state: ClusterState, pending: Sequence[Job]) -> CycleSample:
    """The :class:`CycleSample` of ``state`` (the cluster with the cycle's plan applied) at ``now``."""
    free = []
    for name, node in nodes.items():
        if not node.present or node.status(now) != NodeState.READY:
            continue  # a draining or reconfiguring node takes no new work: nothing on it could be used now
        free.append((name, tuple(free_share(gpu) for gpu in state.node_gpus(name))))
    return CycleSample(now, tuple(free), tuple(pending))
