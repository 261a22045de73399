"""Cross-references of a scenario's timeline, checked in replay order.

A team, job or node must exist when an event names it: a submit names a team defined at the start or by an
earlier ``set_quota``; ``cancel``/``finish``/``checkpoint``/``set_priority`` name a job submitted before;
``interrupt``/``remove_node`` name a node in the cluster at that moment (a node under a spot notice is gone
from its deadline on); ``add_node`` names a node not in the cluster. Job ids and observation labels are
unique, and without ``until`` every job needs a ``duration_s`` so that the run can end.
"""

from __future__ import annotations

import heapq

from scheduler.core.model.snapshot import Node, Team
from scheduler.sim.events import (
    AddNode,
    Cancel,
    Checkpoint,
    Finish,
    Interrupt,
    Observe,
    RemoveNode,
    SetPriority,
    SetQuota,
    Submit,
    TimedEvent,
)
from scheduler.specs.fields import Errors, join


def check_timeline(
    errors: Errors, nodes: list[Node], teams: list[Team], events: list[TimedEvent], *, has_until: bool
) -> None:
    """References in replay order: teams, jobs and nodes must exist when an event names them."""
    team_names = {team.name for team in teams}
    present = {node.name for node in nodes}
    leaving: list[tuple[float, str]] = []  # (gone at, node) for nodes under a spot notice
    noticed: dict[str, float] = {}  # node → when it goes
    jobs: dict[str, str] = {}  # job id → path of its submit
    labels: dict[str, str] = {}
    for event in sorted(events, key=lambda e: (e.t, e.index)):
        # A node under notice is gone from its deadline on, before events at that t (as in the replay).
        while leaving and leaving[0][0] <= event.t:
            gone_at, gone = heapq.heappop(leaving)
            if noticed.get(gone) == gone_at:  # not removed (and perhaps re-added) meanwhile
                present.discard(gone)
                del noticed[gone]
        path = f"events[{event.index}]"
        action = event.action
        if isinstance(action, Submit):
            where = join(path, "submit")
            if action.job.id in jobs:
                errors.add(
                    join(where, "id"), f"duplicate job id {action.job.id!r}; first submitted at {jobs[action.job.id]}"
                )
            else:
                jobs[action.job.id] = where
            if action.job.team not in team_names:
                errors.add(
                    join(where, "team"), f"unknown team {action.job.team!r}; teams: {', '.join(sorted(team_names))}"
                )
            if action.job.duration_s is None and not has_until:
                errors.add(
                    join(where, "duration_s"),
                    "required when the scenario has no until: the run ends when nothing is left to happen",
                )
        elif isinstance(action, Cancel | Finish | Checkpoint | SetPriority):
            key = type(action).__name__.lower().replace("setpriority", "set_priority")
            where = join(join(path, key), "job") if isinstance(action, SetPriority) else join(path, key)
            if action.job not in jobs:
                errors.add(where, f"unknown job {action.job!r}: no submit before this event")
        elif isinstance(action, SetQuota):
            team_names.add(action.team.name)
        elif isinstance(action, AddNode):
            if action.node.name in present:
                errors.add(join(join(path, "add_node"), "name"), f"node {action.node.name!r} already exists")
            present.add(action.node.name)
        elif isinstance(action, RemoveNode | Interrupt):
            key = "remove_node" if isinstance(action, RemoveNode) else "interrupt"
            where = path + "." + key + (".node" if isinstance(action, Interrupt) else "")
            if action.node not in present:
                errors.add(where, f"unknown node {action.node!r}: not in the cluster at t={event.t:g}")
            elif isinstance(action, RemoveNode):
                present.discard(action.node)
                noticed.pop(action.node, None)
            elif action.node in noticed:
                errors.add(where, f"node {action.node!r} is already under an interruption notice")
            else:
                noticed[action.node] = event.t + action.notice_s
                heapq.heappush(leaving, (event.t + action.notice_s, action.node))
        elif isinstance(action, Observe):
            if action.label in labels:
                errors.add(join(path, "observe"), f"label {action.label!r} already used at {labels[action.label]}")
            labels[action.label] = join(path, "observe")
