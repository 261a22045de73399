"""What a scheduling cycle writes to the log: one line for the cycle, one per decision kind, one per decision.

- INFO, one per cycle: the counts (``cycle 1234: 3 binds, 1 eviction, … in 40 ms``), with ``cycle`` and each
  count as fields;
- INFO, one per decision kind the cycle made (binds, evictions, reconfigurations, rejections, moves), naming the jobs
  and nodes, with ``cycle``, ``kind`` and the ``jobs`` / ``teams`` / ``nodes`` as lists;
- DEBUG, one per decision, with ``cycle``, ``kind``, ``job``, ``team`` and ``node`` where they apply, so a
  log pipeline answers "what did the loop do with job 41" by a field (``LOG_FORMAT=json``, docs/deploy.md).

``cycle`` is the cycle's fencing token (:mod:`scheduler.loop.locks`), which grows by one per cycle across every
worker; a cycle run without the lock (a test, a one-off command) has none and its lines leave the field out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobs.models import Job

log = logging.getLogger("scheduler.loop.cycle")

# Listing every job of a 500-bind cycle in one line helps nobody reading plain text; the fields keep them all.
NAMED_IN_MESSAGE = 10
_KINDS = ("bind", "eviction", "reconfiguration", "rejection", "move")


@dataclass(frozen=True)
class Decision:
    kind: str  # bind, eviction, reconfiguration, rejection, move
    job: str | None
    team: str | None
    node: str | None
    detail: str  # the reason, or the MIG reconfiguration, in words


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _teams_of(job_ids: Iterable[str]) -> dict[str, str]:
    ids = {int(job_id) for job_id in job_ids if job_id.isdigit()}
    if not ids:
        return {}
    return {str(pk): slug for pk, slug in Job.objects.filter(pk__in=ids).values_list("pk", "team__slug")}


def decisions_of(decisions: Mapping[str, Any]) -> list[Decision]:
    """The cycle report's decisions (``CycleReport.decisions``) one by one, with each job's team."""
    binds: Sequence[Mapping[str, Any]] = decisions.get("binds", [])
    evictions: Sequence[Mapping[str, Any]] = decisions.get("evictions", [])
    reconfigurations: Sequence[Mapping[str, Any]] = decisions.get("reconfigurations", [])
    rejections: Sequence[Mapping[str, Any]] = decisions.get("rejections", [])
    moves: Sequence[Mapping[str, Any]] = decisions.get("moves", [])
    teams = _teams_of(str(d["job"]) for d in (*binds, *evictions, *rejections, *moves))
    found: list[Decision] = []
    for bind in binds:
        nodes = sorted({slot["node"] for replica in bind["placements"] for slot in replica})
        job = str(bind["job"])
        found.append(Decision("bind", job, teams.get(job), ",".join(nodes) or None, _size(bind["placements"])))
    for evict in evictions:
        job = str(evict["job"])
        by = f" for job {evict['by']}" if evict.get("by") else ""
        found.append(Decision("eviction", job, teams.get(job), None, f"{evict['reason']}{by}"))
    for change in reconfigurations:
        found.append(Decision("reconfiguration", None, None, change["node"], f"GPU {change['gpu']} → {change['new']}"))
    for reject in rejections:
        job = str(reject["job"])
        found.append(Decision("rejection", job, teams.get(job), None, str(reject["reason"])))
    for move in moves:
        job = str(move["job"])
        nodes = sorted({slot["node"] for replica in move["to"] for slot in replica})
        detail = f"to {_size(move['to'])}, from {_size(move['from'])} (generation {move['generation']})"
        found.append(Decision("move", job, teams.get(job), ",".join(nodes) or None, detail))
    return found


def _size(placements: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    """``4 GPUs``, ``2 × 3g.40gb``: what a bind holds."""
    slots = [slot for replica in placements for slot in replica]
    profiles = sorted({str(slot["mig_profile"]) for slot in slots if slot.get("mig_profile")})
    if profiles:
        return f"{len(slots)} × {'/'.join(profiles)}"
    return _plural(len(slots), "GPU")


def _line(decision: Decision) -> str:
    subject = f"job {decision.job}" if decision.job is not None else f"node {decision.node}"
    team = f" ({decision.team})" if decision.team else ""
    where = f" on {decision.node}" if decision.job is not None and decision.node else ""
    return f"{subject}{team}{where}: {decision.detail}"


def cycle_log(
    *,
    cycle: int | None,
    decisions: Mapping[str, Any],
    repairs: int,
    failed: int,
    duration_ms: float,
) -> None:
    """Write the cycle's lines (module doc)."""
    base: dict[str, Any] = {} if cycle is None else {"cycle": cycle}
    name = "cycle" if cycle is None else f"cycle {cycle}"
    found = decisions_of(decisions)
    counts = {kind: sum(1 for d in found if d.kind == kind) for kind in _KINDS}
    waiting = int(decisions.get("waiting", 0))
    words = [_plural(counts[kind], kind) for kind in _KINDS]
    log.info(
        "%s: %s, %d waiting, %s, %d failed in %.0f ms",
        name,
        ", ".join(words),
        waiting,
        _plural(repairs, "repair"),
        failed,
        duration_ms,
        extra={
            **base,
            **{f"{kind}s": n for kind, n in counts.items()},
            "waiting": waiting,
            "repairs": repairs,
            "failed": failed,
            "duration_ms": round(duration_ms, 1),
        },
    )
    for kind in _KINDS:
        these = [d for d in found if d.kind == kind]
        if not these:
            continue
        named = "; ".join(_line(d) for d in these[:NAMED_IN_MESSAGE])
        more = f"; and {len(these) - NAMED_IN_MESSAGE} more" if len(these) > NAMED_IN_MESSAGE else ""
        log.info(
            "%s: %s: %s%s",
            name,
            _plural(len(these), kind),
            named,
            more,
            extra={
                **base,
                "kind": kind,
                "jobs": [d.job for d in these if d.job is not None],
                "teams": sorted({d.team for d in these if d.team}),
                "nodes": sorted({node for d in these if d.node for node in d.node.split(",")}),
            },
        )
        if log.isEnabledFor(logging.DEBUG):
            for decision in these:
                fields = {"job": decision.job, "team": decision.team, "node": decision.node}
                log.debug(
                    "%s: %s %s",
                    name,
                    kind,
                    _line(decision),
                    extra={**base, "kind": kind, **{k: v for k, v in fields.items() if v is not None}},
                )
