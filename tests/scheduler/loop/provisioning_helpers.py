"""Shared pieces of the node-request tests: a full fleet, an autoscaled pool of the simulated cloud, and plans with
the engine's provisioning decisions added by hand (the engine's rule is tested on its own, under scheduler/core)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from jobs.models import Job, JobEvent
from jobs.selectors.timeline import event_text
from jobs.services import JobSubmission, job_submit_bulk
from scheduler.autoscaled import AutoscaledPool, Autoscaler
from scheduler.core import Plan, Snapshot
from scheduler.core.model.vocabulary import EventType
from scheduler.loop import cycle as cycle_module
from scheduler.models import GpuModel
from scheduler.services.fleet import gpu_models_sync, node_register
from teams.models import Team
from tests.scheduler.loop_helpers import Clock

A100 = "A100-SXM4-80GB"
LONG_S = 10_000_000  # virtual seconds: nothing ends while a test runs


def full_fleet(team: Team, clock: Clock) -> None:
    """One reserved 8-GPU A100 node, every GPU held by a long job of ``team`` once a cycle has run."""
    gpu_models_sync()
    node_register(
        name="a100-res-1",
        gpu_model=A100,
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="leaf-1",
        spine="spine-1",
        tier="reserved",
        price_per_gpu_hour="2.2295",
    )
    submit(team, clock, "run", count=8, gpus=1, duration_s=LONG_S)


def submit(team: Team, clock: Clock, prefix: str, *, count: int = 1, gpus: int = 8, duration_s: int = 600) -> list[Job]:
    spec = {"kind": "training", "gpus": gpus, "duration_s": duration_s}
    job_submit_bulk(
        submissions=[JobSubmission(team=team, spec={**spec, "name": f"{prefix}-{i}"}) for i in range(count)],
        actor=None,
        now=clock.now,
    )
    return list(Job.objects.filter(name__startswith=f"{prefix}-").order_by("pk"))


def pool_seed(name: str = "a100-od", **overrides: Any) -> AutoscaledPool:
    gpu_models_sync()
    values: dict[str, Any] = {
        "name": name,
        "autoscaler": Autoscaler.SIMULATED,
        "provisioning_class": "",
        "gpu_model": GpuModel.objects.get(name=A100),
        "gpus_per_node": 8,
        "max_nodes": 4,
        "arrival_s": 600.0,  # virtual seconds: 10 s of the test fleet's clock at 60×
        "price_per_gpu_hour": "3.4300",
    }
    values.update(overrides)
    return AutoscaledPool.objects.create(**values)


Decide = Callable[[Snapshot, Plan], Plan]


@contextmanager
def plans(decide: Decide) -> Iterator[list[Snapshot]]:
    """The next cycles plan as the engine does less its own provisions, withdrawals and releases, then ``decide``
    adds to the plan (seeing the cycle's snapshot); yields the snapshots the cycles planned from. The loop's side is
    tested on decisions made by hand, whatever the engine's rule would decide (test_provisioning_loop.py also runs
    the rule itself)."""
    real = cycle_module.plan_cycle
    seen: list[Snapshot] = []

    def planned(snapshot: Snapshot, *args: Any, **kwargs: Any) -> Plan:
        seen.append(snapshot)
        plan = replace(real(snapshot, *args, **kwargs), provisions=(), withdrawals=(), releases=())
        return decide(snapshot, plan)

    cycle_module.plan_cycle = planned
    try:
        yield seen
    finally:
        cycle_module.plan_cycle = real


def once(**elements: Any) -> Decide:
    """A decision added to the first plan only."""
    done: list[bool] = []

    def decide(_snapshot: Snapshot, plan: Plan) -> Plan:
        if done:
            return plan
        done.append(True)
        return replace(plan, **elements)

    return decide


def request_steps(job: Job) -> list[str]:
    """The job's node-request events as its timeline words them (scheduler.loop.provisioning_events)."""
    events = JobEvent.objects.filter(job=job, type=EventType.NODE_REQUEST).order_by("at", "pk")
    return [event_text(event) for event in events]
