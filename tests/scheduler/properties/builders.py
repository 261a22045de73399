"""Small builders for snapshots, shared by the placement/cycle unit tests and the property tests."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Slots, Snapshot, Team
from scheduler.core.model.vocabulary import CapacityTier, Interconnect, JobKind, JobTier, Priority
from scheduler.core.placement import IndexedClusterState
from scheduler.core.sizing.layouts import named_layout

A100 = "A100-SXM4-80GB"
A100_40 = "A100-SXM4-40GB"
H100 = "H100-SXM5-80GB"
NOW = 10_000.0


def node(
    name: str,
    model: str = H100,
    gpus: int = 8,
    *,
    interconnect: Interconnect = Interconnect.NVSWITCH,
    tier: CapacityTier = CapacityTier.ON_DEMAND,
    leaf: str = "",
    spine: str = "",
    mig: str | Sequence[str] | None = None,
    **kwargs: object,
) -> Node:
    """A node; ``mig`` names a GPU Operator config for every GPU, or one config per GPU ("" = MIG off)."""
    layouts: tuple[tuple[tuple[str, int], ...], ...] = ()
    if isinstance(mig, str):
        layouts = tuple(named_layout(model, mig) for _ in range(gpus))
    elif mig is not None:
        layouts = tuple(named_layout(model, m) if m else () for m in mig)
    return Node(
        name=name,
        gpu_model=model,
        gpu_count=gpus,
        interconnect=interconnect,
        tier=tier,
        leaf=leaf,
        spine=spine,
        mig=layouts,
        **kwargs,  # type: ignore[arg-type]
    )


def job(
    job_id: str,
    team: str = "t",
    *,
    gpus: int | None = None,
    mig: str | None = None,
    milli: int | None = None,
    memory_gib: float | None = None,
    replicas: int = 1,
    kind: JobKind = JobKind.TRAINING,
    priority: Priority = Priority.NORMAL,
    tier: JobTier = JobTier.ANY,
    preemptible: bool = True,
    **kwargs: object,
) -> Job:
    if gpus is None and mig is None and milli is None and memory_gib is None:
        gpus = 1
    request = Request(gpus=gpus, mig_profile=mig, gpu_milli=milli, memory_gib=memory_gib)
    return Job(
        id=job_id,
        team=team,
        request=request,
        kind=kind,
        priority=priority,
        tier=tier,
        replicas=replicas,
        preemptible=preemptible,
        **kwargs,  # type: ignore[arg-type]
    )


def team(name: str = "t", guaranteed: float | None = None, burst: float | None = None, **classes: float) -> Team:
    """A team with an overall guarantee/burst (None: no entry) and per-class guarantees as keywords."""
    g = tuple(sorted(classes.items())) + ((("any", guaranteed),) if guaranteed is not None else ())
    b = (("any", burst),) if burst is not None else ()
    return Team(name=name, guaranteed=tuple(sorted(g)), burst=b)


def whole(node_name: str, *gpus: int) -> tuple[Slot, ...]:
    return tuple(Slot(node_name, g) for g in gpus)


def running(the_job: Job, slots: Slots, started_at: float = 0.0, checkpoint_at: float | None = None) -> Running:
    return Running(job=the_job, slots=slots, started_at=started_at, last_checkpoint_at=checkpoint_at)


def snapshot(
    nodes: Sequence[Node],
    pending: Sequence[Job] = (),
    teams: Sequence[Team] = (),
    running_jobs: Sequence[Running] = (),
    **kwargs: object,
) -> Snapshot:
    return Snapshot(
        nodes=tuple(nodes),
        teams=tuple(teams),
        running=tuple(running_jobs),
        pending=tuple(pending),
        **kwargs,  # type: ignore[arg-type]
    )


def state_of(nodes: Sequence[Node], running_jobs: Sequence[Running] = (), now: float = NOW) -> IndexedClusterState:
    """An :class:`IndexedClusterState` of these nodes and running jobs at ``now``."""
    return IndexedClusterState(snapshot(nodes, running_jobs=running_jobs), now)
