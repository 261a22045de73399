"""Plan digests: one SHA-256 per workload over every plan the engine makes on it, so that a change meant to
leave behaviour alone (a refactor, a speed-up) can be shown to: the digests before and after are equal.

Three families, the ones the benchmarks and the suite run:

- ``scale``: one :func:`~scheduler.core.plan_cycle` on each :mod:`~scheduler.sim.bench.synthetic` cluster of
  ``bench scale`` (the 1,000-node size, and with ``--full`` the 5,000-node one too);
- ``mixed``: every cycle's plan of the engine replaying ``bench mixed``'s workloads (both mixes, seed 42);
- ``scenario``: every cycle's plan of each file of ``tests/scheduler/scenarios/``.

A plan is hashed through :func:`canonical` (dataclasses by class name and fields, enums by value, floats
printed exactly), preceded by the cycle's time: a refactor that turns a string into a ``StrEnum`` of the same
value, or renames a field's type, leaves the digest alone; a changed decision does not.
``--plain`` plans with the engine's speed-ups off (``plan_cycle(..., speedups=False)``),
which must give the same digests.

``--compare`` plans every cycle both ways (on the fast trajectory) and exits 1 at the first cycle whose plans
differ, naming its time.

    python -m scheduler.sim.bench.digest [--full] [--plain | --compare] [--only scale|mixed|scenario]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields, is_dataclass
from enum import Enum
from pathlib import Path

from scheduler.core import Plan, Policy, Snapshot, plan_cycle
from scheduler.sim.bench.mixed_matrix import Setup, workload_of
from scheduler.sim.bench.synthetic import NOW, ClusterShape, synthetic_snapshot
from scheduler.sim.planners import Planner
from scheduler.sim.replay import replay
from scheduler.sim.scenario import load_scenario
from scheduler.sim.topology_model import topology_speed
from scheduler.sim.workload.mixed import MIXES

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "tests" / "scheduler" / "scenarios"
SCALE_SHAPES = (ClusterShape(nodes=1_000, pending=10_000, seed=42),)
FULL_SCALE_SHAPES = (*SCALE_SHAPES, ClusterShape(nodes=5_000, pending=50_000, seed=42))


# Fields added to a plan after digests were first taken, left out while they are empty, so a workload they do not
# concern keeps its digest from before they existed: (class name, field name).
ADDED_WHEN_EMPTY = frozenset({("Plan", "provisions"), ("Plan", "withdrawals"), ("Plan", "releases")})


def canonical(value: object) -> str:
    """``value`` as text that depends only on what it says: enums by value, dataclasses by class and fields (but
    the :data:`ADDED_WHEN_EMPTY` ones that are empty)."""
    if isinstance(value, Enum):
        return repr(value.value)
    if is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        inner = ", ".join(
            f"{f.name}={canonical(getattr(value, f.name))}"
            for f in fields(value)
            if not ((name, f.name) in ADDED_WHEN_EMPTY and getattr(value, f.name) == ())
        )
        return f"{name}({inner})"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(canonical(item) for item in value) + ")"
    return repr(value)


class Hasher:
    """A planner that hashes every plan the wrapped planner makes."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.sha = hashlib.sha256()
        self.cycles = 0

    def __call__(self, snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        plan = self.planner(snapshot, policy, now)
        self.sha.update(f"{now!r}:{canonical(plan)}\n".encode())
        self.cycles += 1
        return plan

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


class PlansDiffer(Exception):
    """``--compare``: the engine planned a cycle differently with its speed-ups off."""


def engine(plain: bool, compare: bool = False) -> Planner:
    """The engine as a planner: speed-ups on, or off (``plain``), or (``compare``) both, failing at the first
    cycle whose plans differ and going on with the fast plan."""

    def plan(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        planned = plan_cycle(snapshot, policy, now, speedups=not plain)
        if compare and canonical(planned) != canonical(plan_cycle(snapshot, policy, now, speedups=False)):
            raise PlansDiffer(f"the plans with and without the speed-ups differ at t={now!r}")
        return planned

    return plan


def scale(plain: bool, full: bool, compare: bool = False) -> Iterator[tuple[str, str, int]]:
    for shape in FULL_SCALE_SHAPES if full else SCALE_SHAPES:
        hasher = Hasher(engine(plain, compare))
        hasher(synthetic_snapshot(shape), Policy(), NOW)
        yield f"scale/{shape.nodes}x{shape.gpus_per_node}-{shape.pending}-s{shape.seed}", hasher.hexdigest(), 1


def mixed(plain: bool, compare: bool = False) -> Iterator[tuple[str, str, int]]:
    from scheduler.sim.bench.mixed_cli import load_runtimes

    _, runtimes = load_runtimes(None)
    setup = Setup(cluster="mixed-64", load=1.2, hours=8.0, warmup_s=7200.0, runtimes=runtimes)
    for mix in MIXES:
        workload = workload_of(setup, mix, 42)
        hasher = Hasher(engine(plain, compare))
        replay(workload.scenario, hasher, speed=topology_speed(workload.cluster.fabric))
        yield f"mixed/{mix}-s42", hasher.hexdigest(), hasher.cycles


def scenarios(
    plain: bool, paths: Sequence[Path] | None = None, compare: bool = False
) -> Iterator[tuple[str, str, int]]:
    """Each scenario file's digest; ``paths``: these files instead of the whole suite."""
    for path in sorted(SCENARIOS.glob("*.json")) if paths is None else paths:
        hasher = Hasher(engine(plain, compare))
        replay(load_scenario(path), hasher)
        yield f"scenario/{path.stem}", hasher.hexdigest(), hasher.cycles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="also the 5,000-node scale cluster")
    parser.add_argument("--plain", action="store_true", help="plan with the speed-ups off")
    parser.add_argument("--only", choices=("scale", "mixed", "scenario"))
    parser.add_argument(
        "--compare", action="store_true", help="plan every cycle both ways too; stop at the first difference"
    )
    options = parser.parse_args(argv)
    families: dict[str, Callable[[], Iterator[tuple[str, str, int]]]] = {
        "scale": lambda: scale(options.plain, options.full, options.compare),
        "mixed": lambda: mixed(options.plain, options.compare),
        "scenario": lambda: scenarios(options.plain, compare=options.compare),
    }
    try:
        for name, family in families.items():
            if options.only in (None, name):
                for label, digest, cycles in family():
                    print(f"{digest}  {label} ({cycles} plans)", flush=True)
    except PlansDiffer as differ:
        print(differ, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
