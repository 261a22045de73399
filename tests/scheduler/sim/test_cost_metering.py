"""B4's billing on hand-built run logs: metered nodes per node-hour of holding any work, reserved every hour."""

from __future__ import annotations

import pytest

from scheduler.core.model.snapshot import Job, Node, Request, Slot
from scheduler.core.model.vocabulary import CapacityTier, JobKind
from scheduler.sim.bench.metering import held_seconds, metered_cost, metered_node_hours, reserved_cost
from scheduler.sim.prices import price_per_gpu_hour
from scheduler.sim.records import RunLog

NODES = {
    "od": Node("od", "A100-SXM4-80GB", 8, tier=CapacityTier.ON_DEMAND, price_per_gpu_hour=3.0),
    "spot": Node("spot", "A100-SXM4-80GB", 8, tier=CapacityTier.SPOT, price_per_gpu_hour=1.0),
    "res": Node("res", "A100-SXM4-80GB", 8, tier=CapacityTier.RESERVED),
}


def run(node: str, start: float, end: float, gpus: int = 1, mig: str | None = None) -> RunLog:
    job = Job("j", "t", Request(gpus=gpus), kind=JobKind.TRAINING)
    slots = (tuple(Slot(node, g, mig_profile=mig, mig_start=0 if mig else None) for g in range(gpus)),)
    return RunLog(job, slots, start, end, 1.0, "completed")


def test_a_node_is_held_while_any_run_holds_any_slot_on_it_counted_once() -> None:
    runs = [run("od", 0, 1800), run("od", 900, 3600), run("od", 5400, 7200), run("spot", 0, 100)]
    held = held_seconds(runs, (0.0, 7200.0))
    assert held == {"od": 3600 + 1800, "spot": 100}
    assert held_seconds(runs, (1000.0, 6000.0))["od"] == 2600 + 600  # the window clips


def test_a_small_slice_bills_the_whole_server_at_its_instance_price() -> None:
    held = held_seconds([run("od", 0, 3600, mig="1g.10gb")], (0.0, 3600.0))
    assert metered_cost(held, NODES) == pytest.approx(8 * 3.0)
    assert metered_node_hours(held, NODES) == 1.0


def test_reserved_is_not_metered_but_paid_every_hour() -> None:
    held = held_seconds([run("res", 0, 60), run("spot", 0, 3600, gpus=8)], (0.0, 3600.0))
    assert metered_cost(held, NODES) == pytest.approx(8 * 1.0)
    cost, gpus = reserved_cost(NODES.values(), hours=2.0)
    assert gpus == {"A100-SXM4-80GB": 8}
    assert cost == pytest.approx(8 * price_per_gpu_hour("A100-SXM4-80GB", "reserved") * 2.0)
