"""The replay's output in the spec's shape (spec/scenario.md, "Output"): observations, events, metrics.

Observation shape, per job (in submission order): ``state``; ``placements`` while running; ``queue_position``,
``reason`` and ``eta_s`` (seconds from the observation, when the engine estimated one) while pending;
``reason`` when rejected; always ``preemptions`` and, as an extension, ``work_done_s`` (work that counts
towards ``duration_s``). Per node: ``state`` (extension:
``ready`` | ``draining`` | ``reconfiguring`` | ``gone``) and ``mig`` (GPU index → ``[profile, start]`` pairs;
GPUs with MIG off are left out). Per team: ``allocated_gpus`` (GPU-equivalents held now),
``guaranteed_gpus`` (the overall guarantee) and ``borrowed_gpus`` (what is held above it).

A placement is one entry per replica and node: ``{"node", "gpus": [...]}`` for whole GPUs,
``{"node", "gpu", "mig_profile", "start"}`` for a MIG instance, ``{"node", "gpu", "gpu_milli"}`` for a share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.snapshot import MigLayout, Slots, Team
from scheduler.core.model.vocabulary import JobState
from scheduler.sim.records import JobRecord, NodeRecord, RunLog

Json = dict[str, Any]


@dataclass(frozen=True)
class ReplayResult:
    """What a replay reports; :meth:`as_dict` is the ``--json`` output.

    Outside the JSON, for metrics over time (``scheduler.sim.metrics``): every run in the order it ended
    (runs still going at the end last), the GPUs present over time as ``(t, gpus from t on)``, and ``end``,
    the time the replay stopped.
    """

    name: str
    observations: tuple[Json, ...]
    final: Json
    events: tuple[Json, ...]
    metrics: Json
    runs: tuple[RunLog, ...] = field(default=(), compare=False)
    capacity: tuple[tuple[float, int], ...] = field(default=(), compare=False)
    end: float = 0.0

    def as_dict(self) -> Json:
        return {
            "name": self.name,
            "observations": list(self.observations),
            "final": self.final,
            "events": list(self.events),
            "metrics": self.metrics,
        }


def num(value: float) -> int | float:
    """Integral floats print as integers; others are rounded to 6 decimals (stable, readable JSON)."""
    rounded = round(float(value), 6)
    return int(rounded) if rounded.is_integer() else rounded


def placements(slots: Slots) -> list[Json]:
    out: list[Json] = []
    for replica in slots:
        whole: dict[str, list[int]] = {}
        for slot in replica:
            if slot.mig_profile is not None:
                out.append(
                    {"node": slot.node, "gpu": slot.gpu, "mig_profile": slot.mig_profile, "start": slot.mig_start}
                )
            elif slot.milli < FULL_GPU_MILLI:
                out.append({"node": slot.node, "gpu": slot.gpu, "gpu_milli": slot.milli})
            else:
                whole.setdefault(slot.node, []).append(slot.gpu)
        out.extend({"node": node, "gpus": sorted(gpus)} for node, gpus in whole.items())
    return out


def layout_json(layout: MigLayout) -> list[list[Any]]:
    return [[profile, start] for profile, start in layout]


def job_view(record: JobRecord, now: float) -> Json:
    view: Json = {"state": record.state.value}
    if record.state == JobState.RUNNING:
        view["placements"] = placements(record.slots)
    elif record.state == JobState.PENDING:
        if record.queue_position is not None:
            view["queue_position"] = record.queue_position
        if record.reason:
            view["reason"] = record.reason
        if record.eta_at is not None:  # counted from the observation, not from the cycle that estimated it
            view["eta_s"] = num(max(0.0, record.eta_at - now))
    elif record.reason:
        view["reason"] = record.reason
    view["preemptions"] = record.preemptions
    view["work_done_s"] = num(record.work_done(now))
    return view


def node_view(record: NodeRecord, now: float) -> Json:
    mig = {str(gpu): layout_json(layout) for gpu, layout in enumerate(record.node.mig) if layout}
    return {"state": record.status(now), "mig": mig}


def overall_guarantee(team: Team) -> float:
    """The ``"any"`` entry, else the sum of the class entries (as ``scheduler.core.rules.fairshare`` reads it)."""
    overall = team.guaranteed_for("any")
    return overall if overall is not None else sum(amount for _, amount in team.guaranteed)


def team_view(team: Team, allocated: float) -> Json:
    guaranteed = overall_guarantee(team)
    return {
        "allocated_gpus": round(allocated, 4),
        "guaranteed_gpus": num(guaranteed),
        "borrowed_gpus": round(max(0.0, allocated - guaranteed), 4),
    }


def state_view(
    t: float,
    jobs: Iterable[JobRecord],
    nodes: Mapping[str, NodeRecord],
    teams: Mapping[str, Team],
    label: str | None = None,
) -> Json:
    """One observation (or, without a label, the final state) at ``t``."""
    allocated = dict.fromkeys(teams, 0.0)
    job_views: Json = {}
    for record in jobs:
        job_views[record.job.id] = job_view(record, t)
        if record.state == JobState.RUNNING:
            allocated[record.job.team] = allocated.get(record.job.team, 0.0) + record.gpu_equivalents
    view: Json = {"t": num(t)}
    if label is not None:
        view["label"] = label
    view["jobs"] = job_views
    view["nodes"] = {name: node_view(record, t) for name, record in nodes.items()}
    view["teams"] = {name: team_view(team, allocated.get(name, 0.0)) for name, team in teams.items()}
    return view
