"""Scenario files (``shared/spec/scenario.md``): load, validate every key, convert to core types.

:func:`load_scenario` reads a JSON file and returns a frozen :class:`Scenario` or raises one
:class:`ScenarioError` listing every problem as ``file: key path: reason`` (``events[3].submit.gpus: must be
an integer ≥ 1, got 0``). Nothing is silently ignored: unknown keys, unknown GPU models, classes or MIG
profiles, illegal layouts, bad types, unknown event types, references to unknown teams, jobs or nodes,
duplicate job ids, a negative ``t`` and requests stated in more or fewer than one way are all errors.

Test extension: a top-level ``"expect"`` key is accepted and not interpreted here (it is kept verbatim in
:attr:`Scenario.expect`); ``tests/scheduler/test_scenarios.py`` reads it as the file's expected outcome.
Other extensions: a job's ``gpu_milli`` and a node's ``sharing`` (see :mod:`scheduler.specs.job` and ``cluster_spec``),
and a job's ``consolidate`` (read here: false keeps production where it starts, docs/job-spec.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Node, Team
from scheduler.core.model.vocabulary import Priority
from scheduler.sim.cluster_spec import parse_node, parse_team
from scheduler.sim.events import (
    Action,
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
from scheduler.sim.references import check_timeline
from scheduler.specs.fields import (
    Errors,
    ScenarioError,
    check_keys,
    describe,
    is_number,
    join,
    read_choice,
    read_int,
    read_list,
    read_number,
    read_object,
    read_str,
)
from scheduler.specs.files import SpecFileError, read_spec_file
from scheduler.specs.job import parse_job

__all__ = [
    "AddNode",
    "Cancel",
    "Checkpoint",
    "Finish",
    "Interrupt",
    "Observe",
    "RemoveNode",
    "Scenario",
    "ScenarioError",
    "SetPriority",
    "SetQuota",
    "Submit",
    "TimedEvent",
    "load_scenario",
    "parse_scenario",
]

TOP_KEYS = ("name", "cycle_s", "until", "policy", "cluster", "teams", "events", "expect")
EVENT_TYPES = (
    "submit",
    "cancel",
    "finish",
    "set_priority",
    "checkpoint",
    "interrupt",
    "add_node",
    "remove_node",
    "set_quota",
    "observe",
)
FINAL_LABEL = "final"
#: The shortest scheduling cycle a scenario may ask for. The loop runs every 10 s by default and a real
#: cycle takes a good part of a second, so a shorter one describes no cluster; it would only multiply the
#: cycles replayed (``cycle_s: 0.001`` with ``until: 1e7`` asks for 10¹⁰ of them).
MIN_CYCLE_S = 1.0


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    policy: Policy  # carries cycle_s
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    events: tuple[TimedEvent, ...]  # sorted by (t, index)
    until: float | None = None  # None: run until nothing is left to happen
    expect: Any = field(default=None, compare=False)  # the test extension, verbatim

    @property
    def cycle_s(self) -> float:
        return self.policy.cycle_s


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raise :class:`ScenarioError` naming the file on any problem.

    Reading is :func:`~scheduler.specs.files.read_spec_file`'s (JSON whatever the name; its limits on
    size, encoding, nesting and numbers); its one problem becomes the error's one line.
    """
    source = str(path)
    try:
        data = read_spec_file(path, expected="a scenario object (cluster, teams, events)")
    except SpecFileError as exc:
        raise ScenarioError(source, exc.errors) from None
    return parse_scenario(data, source=source)


def parse_scenario(data: Any, *, source: str = "<scenario>") -> Scenario:
    """Validate an already-parsed scenario document; ``source`` names it in error messages."""
    errors = Errors(source)
    top = read_object(errors, "", data)
    if top is None:
        errors.raise_if_any()
    assert top is not None
    check_keys(errors, "", top, TOP_KEYS, required=("cluster", "teams", "events"))
    name = Path(source).stem
    if "name" in top:
        name = read_str(errors, "name", top["name"]) or name
    policy = _parse_policy(errors, top)
    until = read_number(errors, "until", top["until"], positive=True) if "until" in top else None
    nodes = _parse_nodes(errors, top.get("cluster"))
    teams = _parse_teams(errors, top.get("teams"))
    events = _parse_events(errors, top.get("events"), until)
    check_timeline(errors, nodes, teams, events, has_until="until" in top)
    errors.raise_if_any()
    return Scenario(
        name=name,
        source=source,
        policy=policy,
        nodes=tuple(nodes),
        teams=tuple(teams),
        events=tuple(sorted(events, key=lambda e: (e.t, e.index))),
        until=until,
        expect=top.get("expect"),
    )


def _parse_policy(errors: Errors, top: dict[str, Any]) -> Policy:
    cycle_s = Policy().cycle_s
    if "cycle_s" in top:
        read = read_number(errors, "cycle_s", top["cycle_s"], positive=True)
        if read is not None and read < MIN_CYCLE_S:
            errors.add("cycle_s", f"must be at least {MIN_CYCLE_S:g} s (a scheduling cycle), got {describe(read)}")
        elif read is not None:
            cycle_s = read
    values: dict[str, Any] = {}
    raw = read_object(errors, "policy", top["policy"]) if "policy" in top else {}
    defaults = {f.name: f.default for f in fields(Policy)}
    for key, value in (raw or {}).items():
        where = join("policy", key)
        if key == "cycle_s":
            errors.add(where, "set cycle_s at the top level of the scenario")
        elif key not in defaults:
            errors.add(where, f"unknown policy key; known: {', '.join(k for k in defaults if k != 'cycle_s')}")
        elif isinstance(defaults[key], bool):
            if not isinstance(value, bool):
                errors.add(where, f"must be true or false, got {describe(value)}")
            else:
                values[key] = value
        elif isinstance(defaults[key], int):
            number = read_int(errors, where, value, minimum=0)
            if number is not None:
                values[key] = number
        elif isinstance(defaults[key], float):
            real = read_number(errors, where, value)
            if real is not None:
                values[key] = real
        else:  # a tunable of a kind this loader does not know: let the policy judge it
            values[key] = value
    try:
        return Policy.from_mapping({**values, "cycle_s": cycle_s})
    except (TypeError, ValueError) as exc:
        errors.add("policy", str(exc))
        return Policy(cycle_s=cycle_s)


_Named = TypeVar("_Named", Node, Team)


def _parse_named(
    errors: Errors, path: str, items: list[Any] | None, parse: Callable[[Errors, str, Any], _Named | None], kind: str
) -> list[_Named]:
    """Parse each item at ``path[i]``; a second item with the same ``name`` is an error naming it."""
    parsed: list[_Named] = []
    seen: set[str] = set()
    for i, item in enumerate(items or []):
        value = parse(errors, f"{path}[{i}]", item)
        if value is None:
            continue
        if value.name in seen:
            errors.add(f"{path}[{i}].name", f"duplicate {kind} name {value.name!r}")
            continue
        seen.add(value.name)
        parsed.append(value)
    return parsed


def _parse_nodes(errors: Errors, value: Any) -> list[Node]:
    cluster = read_object(errors, "cluster", value) if value is not None else None
    if cluster is None:
        return []
    check_keys(errors, "cluster", cluster, ("nodes",), required=("nodes",))
    items = read_list(errors, "cluster.nodes", cluster["nodes"]) if "nodes" in cluster else None
    return _parse_named(errors, "cluster.nodes", items, parse_node, "node")


def _parse_teams(errors: Errors, value: Any) -> list[Team]:
    items = read_list(errors, "teams", value) if value is not None else None
    return _parse_named(errors, "teams", items, parse_team, "team")


def _parse_events(errors: Errors, value: Any, until: float | None) -> list[TimedEvent]:
    items = read_list(errors, "events", value) if value is not None else None
    events: list[TimedEvent] = []
    for i, item in enumerate(items or []):
        path = f"events[{i}]"
        data = read_object(errors, path, item)
        if data is None:
            continue
        kinds = [key for key in data if key != "t"]
        for key in kinds:
            if key not in EVENT_TYPES:
                errors.add(join(path, key), f"unknown event type; use one of: {', '.join(EVENT_TYPES)}")
        known = [key for key in kinds if key in EVENT_TYPES]
        if "t" not in data:
            errors.add(join(path, "t"), "required key is missing")
        if len(known) != 1 and len(kinds) == len(known):
            errors.add(path, f"an event has a t and exactly one of: {', '.join(EVENT_TYPES)}")
        t = _read_t(errors, join(path, "t"), data["t"], until) if "t" in data else None
        if len(known) != 1 or len(kinds) != 1:
            continue
        # Parse the event even when t is wrong, so its own problems are reported in the same run.
        action = _parse_action(errors, join(path, known[0]), known[0], data[known[0]], t or 0.0)
        if action is not None and t is not None:
            events.append(TimedEvent(t=t, index=i, action=action))
    return events


def _read_t(errors: Errors, path: str, value: Any, until: float | None) -> float | None:
    # Finite too: an event at 1e400 (inf) or NaN would never come, and the replay would wait for it.
    if not is_number(value) or not math.isfinite(value) or value < 0:
        errors.add(path, f"must be a non-negative number of seconds, got {describe(value)}")
        return None
    if until is not None and value > until:
        errors.add(path, f"{value:g} is after until ({until:g}): the event would never happen")
        return None
    return float(value)


def _parse_action(errors: Errors, path: str, kind: str, value: Any, t: float) -> Action | None:
    if kind == "submit":
        return _parse_submit(errors, path, value, t)
    if kind in ("cancel", "finish", "checkpoint"):
        job_id = read_str(errors, path, value)
        if job_id is None:
            return None
        about_job: dict[str, Callable[[str], Action]] = {"cancel": Cancel, "finish": Finish, "checkpoint": Checkpoint}
        return about_job[kind](job_id)
    if kind == "set_priority":
        return _parse_set_priority(errors, path, value)
    if kind == "interrupt":
        data = read_object(errors, path, value)
        if data is None:
            return None
        check_keys(errors, path, data, ("node", "notice_s"), required=("node", "notice_s"))
        node = read_str(errors, join(path, "node"), data["node"]) if "node" in data else None
        notice = read_number(errors, join(path, "notice_s"), data["notice_s"]) if "notice_s" in data else None
        return Interrupt(node, notice) if node is not None and notice is not None and len(data) == 2 else None
    if kind == "add_node":
        added = parse_node(errors, path, value)
        return AddNode(added) if added else None
    if kind == "remove_node":
        name = read_str(errors, path, value)
        return RemoveNode(name) if name else None
    if kind == "set_quota":
        team = parse_team(errors, path, value)
        return SetQuota(team) if team else None
    label = read_str(errors, path, value)
    if label == FINAL_LABEL:
        errors.add(path, f"{FINAL_LABEL!r} names the final state; choose another label")
        return None
    return Observe(label) if label else None


def _parse_submit(errors: Errors, path: str, value: Any, t: float) -> Submit | None:
    """A ``submit`` event's job; the scenario's own job key ``consolidate`` (docs/job-spec.md) is read here."""
    consolidate = True
    if isinstance(value, dict) and "consolidate" in value:
        value = dict(value)
        stated = value.pop("consolidate")
        if isinstance(stated, bool):
            consolidate = stated
        else:
            errors.add(
                join(path, "consolidate"),
                f"must be true (production started on larger capacity may be moved to its right-sized slice, the "
                f"default) or false (the job stays where it starts), got {describe(stated)}",
            )
            parse_job(errors, path, value, submitted_at=t)  # its other problems are reported in the same run
            return None
    job = parse_job(errors, path, value, submitted_at=t)
    if job is None:
        return None
    return Submit(job if consolidate else replace(job, consolidate=False))


def _parse_set_priority(errors: Errors, path: str, value: Any) -> SetPriority | None:
    data = read_object(errors, path, value)
    if data is None:
        return None
    check_keys(errors, path, data, ("job", "priority", "rank"), required=("job",))
    if "priority" not in data and "rank" not in data:
        errors.add(path, "give a priority, a rank or both")
    before = len(errors.messages)
    job_id = read_str(errors, join(path, "job"), data["job"]) if "job" in data else None
    priority = read_choice(errors, join(path, "priority"), data["priority"], Priority) if "priority" in data else None
    rank = read_int(errors, join(path, "rank"), data["rank"], minimum=None) if "rank" in data else None
    if len(errors.messages) > before or job_id is None or (priority is None and rank is None):
        return None
    return SetPriority(job_id, priority, rank)
