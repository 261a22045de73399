"""A replay rendered for people: one line per event, the observations in place, the final state and metrics."""

from __future__ import annotations

from typing import Any

from scheduler.core.model.vocabulary import EventType
from scheduler.sim.report import Json


def render_timeline(result: Json) -> str:
    """``result`` is :meth:`ReplayResult.as_dict`; the text is stable (same result, same text)."""
    lines = [f"Scenario: {result['name']}"]
    observations = list(result["observations"])
    for event in result["events"]:
        while observations and observations[0]["t"] < event["t"]:
            lines.extend(_observation(observations.pop(0)))
        lines.append(f"{_t(event['t'])}  {_event(event)}")
    for observation in observations:
        lines.extend(_observation(observation))
    lines.extend(_observation(result["final"], title="final state"))
    metrics = result["metrics"]
    lines.append("metrics: " + ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in metrics.items()))
    return "\n".join(lines)


def _t(t: Any) -> str:
    return f"t={t:>7}"


def _where(placements: list[Json]) -> str:
    """One phrase per placement; replicas of whole GPUs on one node are merged: "dgx-1 GPU 0,1 | 2,3"."""
    parts: list[str] = []
    previous: str | None = None
    for p in placements:
        if "gpus" in p:
            gpus = ",".join(str(g) for g in p["gpus"])
            if previous == p["node"]:
                parts[-1] += f" | {gpus}"
            else:
                parts.append(f"{p['node']} GPU {gpus}")
            previous = p["node"]
            continue
        previous = None
        if "mig_profile" in p:
            parts.append(f"{p['node']} GPU {p['gpu']} {p['mig_profile']}@{p['start']}")
        else:
            parts.append(f"{p['node']} GPU {p['gpu']} ({p['gpu_milli']} milli-GPU)")
    return "; ".join(parts)


def _layout(layout: list[list[Any]]) -> str:
    return ",".join(f"{profile}@{start}" for profile, start in layout) or "MIG off"


def _event(event: Json) -> str:
    kind = event["type"]
    if kind == EventType.BOUND:
        return f"bound {event['job']} on {_where(event['placements'])}"
    if kind == EventType.PREEMPTED:
        by = f" by {event['by']}" if event.get("by") else ""
        return f"preempted {event['job']}{by} ({event['reason']})"
    if kind == EventType.RECONFIGURED:
        return f"reconfigured {event['node']} GPU {event['gpu']}: {_layout(event['old'])} → {_layout(event['new'])}"
    if kind == EventType.DRAINING:
        if event.get("reason") == "reconfigure":
            return (
                f"draining {event['node']} GPU {event['gpu']} for a MIG reconfiguration, ready at t={event['ready_at']}"
            )
        return f"draining {event['node']} (spot notice), gone at t={event['gone_at']}"
    if kind == EventType.REJECTED:
        return f"rejected {event['job']}: {event['reason']}"
    if kind == EventType.CHECKPOINTED:
        return f"checkpointed {event['job']} ({event['work_done_s']} s of work saved)"
    return f"{kind} {event['job']}"


def _observation(view: Json, title: str | None = None) -> list[str]:
    lines = [f"{_t(view['t'])}  ── {title or 'observe: ' + view['label']} ──"]
    for job_id, job in view["jobs"].items():
        text = f"    job {job_id}: {job['state']}"
        if "placements" in job:
            text += f" on {_where(job['placements'])}"
        if "queue_position" in job:
            text += f", queue position {job['queue_position']}"
        if job.get("reason"):
            text += f" — {job['reason']}"
        if job.get("preemptions"):
            text += f" (preempted {job['preemptions']}×)"
        lines.append(text)
    for name, node in view["nodes"].items():
        mig = "; ".join(f"GPU {gpu}: {_layout(layout)}" for gpu, layout in node["mig"].items())
        lines.append(f"    node {name}: {node['state']}" + (f", MIG {mig}" if mig else ""))
    for name, team in view["teams"].items():
        lines.append(
            f"    team {name}: {team['allocated_gpus']} GPUs allocated, {team['guaranteed_gpus']} guaranteed, "
            f"{team['borrowed_gpus']} borrowed"
        )
    return lines
