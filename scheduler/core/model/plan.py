"""What the engine decides: the operations of one cycle, in the order they must be applied."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model.provisioning import Provision, Release, Withdraw
from scheduler.core.model.snapshot import MigLayout, Slot, Slots
from scheduler.core.model.vocabulary import BlockerKind, EvictionReason


@dataclass(frozen=True, slots=True)
class Bind:
    """Start every replica of ``job`` on ``slots`` (one tuple per replica): a gang binds whole or not at all."""

    job: str
    slots: tuple[tuple[Slot, ...], ...]

    def __init__(self, job: str, slots: tuple[tuple[Slot, ...], ...]) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "slots", slots)


@dataclass(frozen=True, slots=True)
class Evict:
    """Stop ``job`` and requeue it (work since its last checkpoint is lost)."""

    job: str
    reason: EvictionReason
    by: str | None = None  # the job this eviction makes room for


@dataclass(frozen=True, slots=True)
class Reconfigure:
    """Change one GPU's MIG layout; every instance on it is destroyed, so it must be empty first."""

    node: str
    gpu: int
    old: MigLayout
    new: MigLayout
    ready_at: float


@dataclass(frozen=True, slots=True)
class Move:
    """Consolidate running ``job`` make-before-break: its replicas start again on ``slots`` (its right-sized
    capacity) while the old ones keep serving on ``released``, which is given back once the new replicas are ready
    — as a rolling update does. The job keeps running throughout; nothing is lost."""

    job: str
    slots: Slots  # the new placement, one tuple per replica
    released: Slots  # the placement it holds now, released when the new replicas are ready


@dataclass(frozen=True, slots=True)
class Reject:
    """The job can never run on this cluster; ``reason`` says why in words a person can act on."""

    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a pending job is still pending, where it stands, and when it may start."""

    job: str
    position: int  # 1-based in the global order
    team_position: int  # 1-based among its team's pending jobs
    reason: str
    eta_s: float | None = None  # seconds from now, when the engine can estimate it
    blocker: BlockerKind | None = None  # what blocks it (None: a planner that does not say, as baselines do not)

    def __init__(
        self,
        job: str,
        position: int,
        team_position: int,
        reason: str,
        eta_s: float | None = None,
        blocker: BlockerKind | None = None,
    ) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "team_position", team_position)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "eta_s", eta_s)
        object.__setattr__(self, "blocker", blocker)


@dataclass(frozen=True, slots=True)
class Plan:
    evictions: tuple[Evict, ...] = ()
    reconfigurations: tuple[Reconfigure, ...] = ()
    binds: tuple[Bind, ...] = ()
    rejections: tuple[Reject, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    moves: tuple[Move, ...] = ()
    provisions: tuple[Provision, ...] = ()  # on-demand nodes to ask for (model/provisioning.py)
    withdrawals: tuple[Withdraw, ...] = ()  # node requests to give up
    releases: tuple[Release, ...] = ()  # autoscaled nodes to give back

    @property
    def is_empty(self) -> bool:
        return not (self.evictions or self.reconfigurations or self.binds or self.rejections or self.moves)
