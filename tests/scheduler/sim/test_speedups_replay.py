"""The engine's speed-ups decide nothing on a replayed workload either: every cycle of the first 20 minutes of
``bench mixed``'s serving workload (seed 42) is planned with the speed-ups on and off, and the plans must be
equal. The synthetic clusters of ``tests/scheduler/core/speedups/test_speedups.py`` are single snapshots; a replay
reaches states they do not — a node held for production's MIG reconfiguration next cycle, for one, which the
index's idle classes knew of and the plain scan did not until ``ClusterState.held`` said so."""

from __future__ import annotations

import contextlib

from scheduler.core import Plan, Policy, Snapshot, plan_cycle
from scheduler.sim.bench.digest import canonical
from scheduler.sim.bench.mixed_cli import load_runtimes
from scheduler.sim.bench.mixed_matrix import Setup, workload_of
from scheduler.sim.replay import replay
from scheduler.sim.topology_model import topology_speed

CYCLES = 120  # 20 simulated minutes at the workload's 10 s cycle (the divergence this caught came at the 31st)


class _Enough(Exception):
    pass


def test_every_cycle_plans_the_same_with_and_without_the_speedups() -> None:
    _, runtimes = load_runtimes(None)
    setup = Setup(cluster="mixed-64", load=1.2, hours=8.0, warmup_s=7200.0, runtimes=runtimes)
    workload = workload_of(setup, "serving", 42)
    compared: list[float] = []

    def planner(snapshot: Snapshot, policy: Policy, now: float) -> Plan:
        fast = plan_cycle(snapshot, policy, now)
        plain = plan_cycle(snapshot, policy, now, speedups=False)
        assert canonical(fast) == canonical(plain), f"the plans differ at t={now:g}"
        compared.append(now)
        if len(compared) == CYCLES:
            raise _Enough
        return fast

    with contextlib.suppress(_Enough):  # the planner stops the replay after CYCLES cycles
        replay(workload.scenario, planner, speed=topology_speed(workload.cluster.fabric))
    assert len(compared) == CYCLES
