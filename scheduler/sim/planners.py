"""The planners a scenario can be replayed with, by name (``manage.py scenario run --policy NAME``).

A planner has the engine's signature, ``(snapshot, policy, now) -> Plan``. ``microcosm`` is the engine
itself (:func:`scheduler.core.planning.cycle.plan_cycle`); the baselines of the benchmarks (``naive``, ``k8s-default``,
``binpack``, ``fgd``: :mod:`scheduler.sim.baselines`) register here under their own names.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core.model.plan import Plan
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Snapshot
from scheduler.sim.baselines import BASELINES

Planner = Callable[[Snapshot, Policy, float], Plan]
DEFAULT_PLANNER = "microcosm"


def microcosm(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
    """The engine; imported on first use so the simulator loads even while the core is incomplete."""
    from scheduler.core.planning.cycle import plan_cycle

    return plan_cycle(snapshot, policy, now)


PLANNERS: dict[str, Planner] = {DEFAULT_PLANNER: microcosm, **BASELINES}


class UnknownPlanner(LookupError):
    def __init__(self, name: str) -> None:
        self.name = name
        known = [DEFAULT_PLANNER, *sorted(set(PLANNERS) - {DEFAULT_PLANNER})]  # the engine first, then A–Z
        super().__init__(f"unknown policy {name!r}; known policies: {', '.join(known)}")


def planner_named(name: str) -> Planner:
    """The planner registered as ``name``; :class:`UnknownPlanner` lists the known names otherwise."""
    try:
        return PLANNERS[name]
    except KeyError:
        raise UnknownPlanner(name) from None
