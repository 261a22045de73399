"""The events of a scenario's timeline (spec/scenario.md, "Events"), as frozen values."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model.snapshot import Job, Node, Team
from scheduler.core.model.vocabulary import Priority


@dataclass(frozen=True, slots=True)
class Submit:
    job: Job


@dataclass(frozen=True, slots=True)
class Cancel:
    job: str


@dataclass(frozen=True, slots=True)
class Finish:
    """The job ends now, successfully (its remaining work is not needed)."""

    job: str


@dataclass(frozen=True, slots=True)
class SetPriority:
    job: str
    priority: Priority | None = None
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint of a running job completed now: its work so far survives a preemption."""

    job: str


@dataclass(frozen=True, slots=True)
class Interrupt:
    """A spot interruption notice: the node takes no new work now and disappears ``notice_s`` later."""

    node: str
    notice_s: float


@dataclass(frozen=True, slots=True)
class AddNode:
    node: Node


@dataclass(frozen=True, slots=True)
class RemoveNode:
    node: str


@dataclass(frozen=True, slots=True)
class SetQuota:
    team: Team


@dataclass(frozen=True, slots=True)
class Observe:
    label: str


Action = Submit | Cancel | Finish | SetPriority | Checkpoint | Interrupt | AddNode | RemoveNode | SetQuota | Observe


@dataclass(frozen=True, slots=True)
class TimedEvent:
    t: float
    index: int  # position in the file's ``events`` list: events at the same t apply in this order
    action: Action
