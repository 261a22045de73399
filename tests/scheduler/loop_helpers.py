"""Shared pieces for the scheduling-loop tests: a small fleet, a team, a controllable clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from jobs.models import Allocation, Job
from scheduler.core import Slot
from scheduler.core.model.plan import Move
from scheduler.gateways.protocol import Observation
from scheduler.gateways.simulated import FleetSettings, SimulatedFleet
from scheduler.loop import cycle as cycle_module
from scheduler.services.fleet import gpu_models_sync, node_register
from teams.models import Quota, Team

BALANCED_80GB = [["1g.10gb", 0], ["1g.10gb", 1], ["2g.20gb", 2], ["3g.40gb", 4]]


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or timezone.now().replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def fleet_seed() -> None:
    """Three nodes: an 8-GPU reserved A100 box, a 4-GPU spot PCIe server, a MIG-partitioned on-demand box."""
    gpu_models_sync()
    node_register(
        name="a100-res-1",
        gpu_model="A100-SXM4-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="leaf-1",
        spine="spine-1",
        tier="reserved",
        price_per_gpu_hour="2.2295",
    )
    node_register(
        name="pcie-spot-1",
        gpu_model="A100-PCIE-40GB",
        gpu_count=4,
        interconnect="nvlink-pairs",
        leaf_switch="leaf-2",
        spine="spine-1",
        tier="spot",
        price_per_gpu_hour="0.6650",
    )
    node_register(
        name="mig-od-1",
        gpu_model="A100-SXM4-80GB",
        gpu_count=2,
        interconnect="nvswitch",
        leaf_switch="leaf-2",
        spine="spine-1",
        tier="on-demand",
        price_per_gpu_hour="3.43",
        mig_layouts={0: BALANCED_80GB},
    )


def team_seed(slug: str = "nlp", guaranteed: int = 8, burst: int = 16) -> Team:
    team = Team.objects.create(name=slug.upper(), slug=slug, namespace=f"team-{slug}")
    Quota.objects.create(team=team, gpu_class="any", guaranteed_gpus=Decimal(guaranteed), burst_gpus=Decimal(burst))
    return team


def fleet(clock: Clock, **overrides: float) -> SimulatedFleet:
    """A simulated fleet at 60× speed with no spot interruptions unless asked."""
    values = {"speed": 60.0, "interruptions_per_node_hour": 0.0, "seed": 7, **overrides}
    return SimulatedFleet(FleetSettings(**values), clock=clock)  # type: ignore[arg-type]


class SlowFleet(SimulatedFleet):
    """Observing takes a while, so a second cycle attempt surely overlaps the first."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(FleetSettings(speed=60.0, interruptions_per_node_hour=0.0))
        self.delay_s = delay_s
        self.observers: list[str] = []

    def observe(self) -> Observation:
        self.observers.append(threading.current_thread().name)
        time.sleep(self.delay_s)
        return super().observe()


@contextmanager
def plan_with_move(job: Job, to: tuple[tuple[Slot, ...], ...]) -> Iterator[None]:
    """The next cycles plan as usual plus a move of ``job`` from what it holds now to ``to``: the live side of a
    move is tested before (and apart from) the engine deciding one."""
    real = cycle_module.plan_cycle
    released = tuple(
        (Slot(node=a.node.name, gpu=a.gpu_index, mig_profile=a.mig_profile or None, mig_start=a.mig_start),)
        for a in Allocation.objects.filter(job=job, ended_at__isnull=True).order_by("replica")
    )

    def planned(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        return replace(plan, moves=(Move(job=str(job.pk), slots=to, released=released),))

    cycle_module.plan_cycle = planned  # type: ignore[assignment]
    try:
        yield
    finally:
        cycle_module.plan_cycle = real
