"""B2's runs — every load × mix × seed × policy — spread over a pool of worker processes.

Each run is one policy replaying one generated workload (:func:`scheduler.sim.bench.mixed_run.run_planner`) of
one load (its :class:`Setup`); runs are independent, so ``workers`` processes (``--jobs``, default 2: the
machine's two cores) take them in turn, as ``bench openb`` does (:mod:`scheduler.sim.openb.matrix`). A worker
regenerates the workload of its run from the seed (the generator is pure and fast), so nothing large crosses the
process boundary; results come back in the order of the runs whatever the order they finished in.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

from scheduler.core.model.policy import Policy
from scheduler.sim.bench.mixed_run import PlannerResult, run_planner
from scheduler.sim.workload.clusters import cluster_named
from scheduler.sim.workload.mixed import MIXES, Workload, WorkloadConfig, generate


@dataclass(frozen=True)
class Setup:
    """What every run of one ``bench mixed`` shares."""

    cluster: str
    load: float
    hours: float
    warmup_s: float
    runtimes: tuple[float, ...]
    strict: bool = False
    # The policy's setting (rules/search_bound.py); None: unbounded.
    preemption_search_per_team: int | None = Policy().preemption_search_per_team

    def config(self, mix: str, seed: int) -> WorkloadConfig:
        return WorkloadConfig(
            seed=seed,
            load=self.load,
            hours=self.hours,
            warmup_s=self.warmup_s,
            inference_share=MIXES[mix],
            policy=Policy(preemption_search_per_team=self.preemption_search_per_team),
        )


@dataclass(frozen=True)
class Task:
    mix: str
    seed: int
    policy: str


def workload_of(setup: Setup, mix: str, seed: int) -> Workload:
    return _workload(setup, mix, seed)


@lru_cache(maxsize=4)  # a worker usually runs several policies of one workload in a row
def _workload(setup: Setup, mix: str, seed: int) -> Workload:
    return generate(cluster_named(setup.cluster), setup.config(mix, seed), setup.runtimes)


def _run(setup: Setup, task: Task) -> PlannerResult:
    return run_planner(_workload(setup, task.mix, task.seed), task.policy, strict=setup.strict, cycles=True)


def run_tasks(runs: Sequence[tuple[Setup, Task]], workers: int = 1) -> list[PlannerResult]:
    """Every run's result, in ``runs`` order (a run: the setup of its load and its task); ``workers`` > 1 runs
    them in that many processes (fork)."""
    if workers <= 1 or len(runs) <= 1:
        return [_run(setup, task) for setup, task in runs]
    context = multiprocessing.get_context("fork")  # workers inherit the loaded run-time sample and planners
    with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context) as pool:
        return list(pool.map(_run, [setup for setup, _ in runs], [task for _, task in runs]))
