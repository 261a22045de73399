"""How much replaying a scenario asks for, and the bound ``manage.py scenario run`` holds it to.

A replay plans once per cycle, and a cycle costs about 20–150 µs per job on one core (more jobs, less
per job), so the work is measured in *cycle-jobs*: the cycles from t = 0 to the end times the jobs the file
submits. The end is ``until``; without it the run goes on until nothing is left to happen, which is no
sooner than the last event and the last job's submission plus its ``duration_s``, so that lower bound is
what is counted. The defaults, :data:`DEFAULT_MAX_WORK` cycle-jobs and :data:`DEFAULT_MAX_CYCLES` cycles,
keep one run within a few minutes; a file asking for more is refused before anything runs, with the flag
that lets it through. The test scenarios ask for at most 6,489 cycle-jobs (721 cycles × 9 jobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.sim.events import Submit
from scheduler.sim.scenario import Scenario
from scheduler.specs.fields import ScenarioError

#: Cycles × jobs a run may ask for without ``--max-work``: about two minutes of replay.
DEFAULT_MAX_WORK = 5_000_000
#: Cycles a run may ask for without ``--max-cycles``, however few its jobs: a cycle has a cost of its own.
DEFAULT_MAX_CYCLES = 1_000_000


@dataclass(frozen=True)
class Work:
    """The replay a scenario asks for: ``cycles`` ticks (every ``cycle_s`` from t = 0 up to ``end_s``)."""

    end_s: float
    cycle_s: float
    cycles: int
    jobs: int
    until: bool  # False: ``end_s`` is the lower bound of a run that ends when nothing is left to happen

    @property
    def cycle_jobs(self) -> int:
        return self.cycles * max(self.jobs, 1)


def scenario_work(scenario: Scenario) -> Work:
    """Count the cycles and jobs of ``scenario``'s replay (module docstring)."""
    jobs = 0
    end_s = 0.0  # without until: the latest event or job end, a lower bound of when the run can stop
    for event in scenario.events:
        end_s = max(end_s, event.t)
        if isinstance(event.action, Submit):
            jobs += 1
            end_s = max(end_s, event.t + (event.action.job.duration_s or 0.0))
    if scenario.until is not None:
        end_s = scenario.until
    # Ticks at 0, cycle_s, 2·cycle_s, … ≤ end: floor + 1 (exact in integers, however large the quotient).
    cycles = math.floor(end_s / scenario.cycle_s) + 1
    return Work(end_s=end_s, cycle_s=scenario.cycle_s, cycles=cycles, jobs=jobs, until=scenario.until is not None)


def check_work(scenario: Scenario, *, max_work: int = DEFAULT_MAX_WORK, max_cycles: int = DEFAULT_MAX_CYCLES) -> Work:
    """The scenario's :class:`Work`, or :class:`ScenarioError` when it is above either bound.

    Each message is ``file: until: …`` and names the flag and the value that would let the run through.
    """
    work = scenario_work(scenario)
    span = (
        f"until {work.end_s:g} s / cycle_s {work.cycle_s:g} s"
        if work.until
        else f"without until it runs at least to t = {work.end_s:g} s, its last event or job end, / cycle_s "
        f"{work.cycle_s:g} s"
    )
    where = f"{scenario.source}: until"
    errors = []
    if work.cycles > max_cycles:
        errors.append(
            f"{where}: this scenario asks for {_count(work.cycles)} cycles ({span}), above the bound of "
            f"{_count(max_cycles)} cycles; {_raise('--max-cycles', work.cycles)}"
        )
    if work.cycle_jobs > max_work:
        errors.append(
            f"{where}: this scenario asks for {_count(work.cycles)} cycles × {_jobs(work.jobs)} = "
            f"{_count(work.cycle_jobs)} cycle-jobs ({span}), above the bound of {_count(max_work)}; "
            f"{_raise('--max-work', work.cycle_jobs)}"
        )
    if errors:
        raise ScenarioError(scenario.source, errors)
    return work


#: Beyond this no flag helps: 10¹² cycles at the cheapest 20 µs each is seven months of replay.
_HOPELESS = 10**12


def _raise(flag: str, needed: int) -> str:
    if needed > _HOPELESS:
        return "no bound would let that finish: lengthen cycle_s or shorten until"
    return f"raise it with {flag} {needed}, or lengthen cycle_s or shorten until"


def _count(n: int) -> str:
    """``1,000,000``; a number too long to read (an until of 1e300) as ``1.00e+300``, without floats, which
    a product of two such numbers would overflow."""
    digits = str(n)
    return f"{n:,}" if len(digits) <= 15 else f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def _jobs(jobs: int) -> str:
    """The job count the work is multiplied by: a scenario without jobs still plans every cycle."""
    return "1 job" if jobs <= 1 else f"{jobs:,} jobs"
