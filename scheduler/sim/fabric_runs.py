"""Multi-node training runs without a fabric: how many, and how fast (B3 reports them).

A run whose GPUs sit on more than one node all-reduces over the network between them; on nodes without a
common fabric that is TCP on the primary interface, and the topology model charges it
(:mod:`scheduler.sim.topology_model`). This counts such runs in a window and their GPU-time-weighted mean
speed (the run's rate: work seconds per second, 1 on an ideal placement), so a report can say what placing
gangs on fabric nodes is worth, and that a policy that ignores fabrics pays for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.core.model.snapshot import Node
from scheduler.core.model.vocabulary import JobKind
from scheduler.sim.records import RunLog
from scheduler.sim.topology_model import on_one_fabric


def without_fabric(runs: Iterable[RunLog], nodes: Mapping[str, Node], window: tuple[float, float]) -> dict[str, object]:
    """``{"runs": n, "gpu_hours": h, "speed": s}`` for the training runs in ``window`` that span nodes without a
    common fabric (``speed`` None when there is none)."""
    count = 0
    gpu_s = work_gpu_s = 0.0
    for run in runs:
        if run.job.kind != JobKind.TRAINING:
            continue
        names = {slot.node for replica in run.slots for slot in replica}
        if len(names) < 2 or on_one_fabric([nodes[name] for name in sorted(names)]):
            continue
        ran = max(0.0, min(run.end, window[1]) - max(run.start, window[0]))
        if ran <= 0:
            continue
        gpus = sum(len(replica) for replica in run.slots)
        count += 1
        gpu_s += gpus * ran
        work_gpu_s += gpus * run.rate * ran
    return {
        "runs": count,
        "gpu_hours": round(gpu_s / 3600.0, 4),
        "speed": round(work_gpu_s / gpu_s, 4) if gpu_s else None,
    }
