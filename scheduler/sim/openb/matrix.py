"""Running many B1 replays — (pod list, policy, seed) triples — in one or more worker processes.

Each replay is independent and deterministic for its seed, so running them in parallel changes only the wall
time. Workers are forked processes that load each trace once; a result carries its own wall time (measured
in the worker around :func:`run_b1`, so it is the time of one replay, not of the whole batch).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scheduler.sim.openb.protocol import B1Run, run_b1
from scheduler.sim.traces import TraceNode, TracePod, load_openb_nodes, load_openb_pods


@dataclass(frozen=True, slots=True)
class Job:
    trace: Path
    policy: str
    seed: int


@dataclass(frozen=True, slots=True)
class Result:
    job: Job
    run: B1Run
    wall_s: float


@lru_cache(maxsize=4)
def _nodes(path: Path) -> tuple[TraceNode, ...]:
    return load_openb_nodes(path)


@lru_cache(maxsize=4)
def _pods(path: Path) -> tuple[TracePod, ...]:
    return load_openb_pods(path)


_NODES_PATH: list[Path] = []


def _replay(job: Job) -> Result:
    nodes, pods = _nodes(_NODES_PATH[0]), _pods(job.trace)
    started = time.perf_counter()
    run = run_b1(nodes, pods, job.policy, job.seed)
    return Result(job, run, time.perf_counter() - started)


def _init(nodes_path: Path) -> None:
    _NODES_PATH[:] = [nodes_path]


def run_all(nodes_path: Path, jobs: Sequence[Job], workers: int = 1) -> list[Result]:
    """Every job's result, in ``jobs`` order. Traces are loaded (and validated) before any replay starts,
    so a bad file fails fast with its ``file:line`` errors."""
    _nodes(nodes_path)
    for trace in dict.fromkeys(job.trace for job in jobs):
        _pods(trace)
    if workers <= 1 or len(jobs) <= 1:
        _init(nodes_path)
        return [_replay(job) for job in jobs]
    context = multiprocessing.get_context("fork")  # workers inherit the loaded traces
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init, initargs=(nodes_path,)
    ) as pool:
        return list(pool.map(_replay, jobs))
