"""Moves in the replay (scheduler/sim/replay.py, module doc): make-before-break — the new slots are held at once,
the old ones until the cycle after, the job keeps its work, and the ledger, run log and metrics count both."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.model.plan import Bind, Evict, Move, Plan
from scheduler.core.model.snapshot import Slot, Slots, Snapshot
from scheduler.core.model.vocabulary import EvictionReason
from scheduler.sim import PlanViolation, parse_scenario, replay
from tests.scheduler.sim.fakes import recording, scripted

WHOLE: Slots = ((Slot("w", 0),),)
SLICE: Slots = ((Slot("m", 0, "4g.40gb", 0),),)
OTHER: Slots = ((Slot("w", 1),),)


def scenario(events: list[dict[str, Any]], until: float = 200) -> Any:
    return parse_scenario(
        {
            "name": "moves",
            "cycle_s": 10,
            "until": until,
            "cluster": {
                "nodes": [
                    {"name": "m", "gpu_model": "A100-SXM4-80GB", "gpus": 1, "mig": {"0": ["4g.40gb", "3g.40gb"]}},
                    {"name": "w", "gpu_model": "A100-SXM4-80GB", "gpus": 2, "price_per_gpu_hour": 7.0},
                ]
            },
            "teams": [{"name": "t", "guaranteed_gpus": 2}],
            "events": events,
        },
        source="moves.json",
    )


def service(job_id: str = "p1", t: float = 0, **keys: Any) -> dict[str, Any]:
    return {"t": t, "submit": {"id": job_id, "team": "t", "mig_profile": "4g.40gb", "duration_s": 100, **keys}}


def _moved_at_20(extra: dict[float, Plan] | None = None) -> Any:
    script = {0.0: Plan(binds=(Bind("p1", WHOLE),)), 20.0: Plan(moves=(Move("p1", SLICE, WHOLE),)), **(extra or {})}
    return scripted(script)


def test_a_move_holds_both_placements_for_a_cycle_and_loses_no_work() -> None:
    seen: list[tuple[float, Snapshot]] = []
    result = replay(scenario([service()]), recording(_moved_at_20(), seen))
    kinds = [(e["t"], e["type"]) for e in result.events]
    assert kinds == [(0, "bound"), (20, "moving"), (30, "moved"), (100, "completed")]
    moving = next(e for e in result.events if e["type"] == "moving")
    assert moving["from"] == [{"node": "w", "gpus": [0]}]
    assert moving["placements"] == [{"node": "m", "gpu": 0, "mig_profile": "4g.40gb", "start": 0}]
    snapshots = {now: snapshot for now, snapshot in seen}
    during = snapshots[30.0].running[0]
    assert (during.slots, during.moving_from, during.moved_at, during.started_at) == (SLICE, WHOLE, (20.0,), 0.0)
    after = snapshots[40.0].running[0]
    assert (after.slots, after.moving_from, after.moved_at) == (SLICE, (), (20.0,))
    # The run log splits the run at the move; the ledger charges the whole GPU until released (at 30).
    assert [(r.start, r.end, r.outcome, r.slots) for r in result.runs] == [
        (0, 20, "moved", WHOLE),
        (20, 100, "completed", SLICE),
    ]
    held = 20 * 1 + 10 * 1 + 80 * 4 / 7
    assert result.metrics["allocation_ratio"] == round(held / (3 * 200), 6)
    assert result.metrics["cost"] == round(7.0 * 30 / 3600, 6)  # only the whole GPU on w has a price
    assert result.metrics["moves"] == 1


def test_the_old_placement_stays_held_until_the_move_completes() -> None:
    """A bind on the old GPU in the cycle after the move is a violation: the job still holds it then."""
    j2 = {"t": 25, "submit": {"id": "j2", "team": "t", "gpus": 1, "duration_s": 10}}
    with pytest.raises(PlanViolation, match="not free"):
        replay(scenario([service(), j2]), _moved_at_20({30.0: Plan(binds=(Bind("j2", WHOLE),))}))
    result = replay(scenario([service(), j2]), _moved_at_20({40.0: Plan(binds=(Bind("j2", WHOLE),))}))
    assert [(e["t"], e["type"], e["job"]) for e in result.events][:4] == [
        (0, "bound", "p1"),
        (20, "moving", "p1"),
        (30, "moved", "p1"),
        (40, "bound", "j2"),
    ]


def test_an_eviction_during_a_move_gives_back_both_placements() -> None:
    seen: list[tuple[float, Snapshot]] = []
    planner = recording(_moved_at_20({30.0: Plan(evictions=(Evict("p1", EvictionReason.PRIORITY, "x"),))}), seen)
    result = replay(scenario([service()], until=60), planner)
    assert [e["type"] for e in result.events] == ["bound", "moving", "preempted", "requeued"]
    assert next(snapshot for now, snapshot in seen if now == 40.0).running == ()
    assert result.metrics["allocation_ratio"] == round((20 + 10 + 10 * 4 / 7) / (3 * 60), 6)


def test_a_job_ending_during_a_move_gives_back_both_placements() -> None:
    result = replay(scenario([service(), {"t": 25, "finish": "p1"}], until=60), _moved_at_20())
    assert [e["type"] for e in result.events] == ["bound", "moving", "completed"]
    assert result.metrics["allocation_ratio"] == round((25 + 5 * 4 / 7) / (3 * 60), 6)


def test_losing_the_old_node_completes_the_move() -> None:
    """The old replicas went with their node; the new ones serve on."""
    seen: list[tuple[float, Snapshot]] = []
    events = [service(), {"t": 25, "remove_node": "w"}]
    result = replay(scenario(events, until=60), recording(_moved_at_20(), seen))
    assert [(e["t"], e["type"]) for e in result.events] == [(0, "bound"), (20, "moving"), (25, "moved")]
    assert next(snapshot for now, snapshot in seen if now == 30.0).running[0].moving_from == ()


def test_moves_of_the_last_day_only_reach_the_snapshot() -> None:
    seen: list[tuple[float, Snapshot]] = []
    replay(scenario([service(duration_s=100_000)], until=86_440), recording(_moved_at_20(), seen))
    assert [s.running[0].moved_at for now, s in seen if now in (86_410.0, 86_430.0)] == [(20.0,), ()]


@pytest.mark.parametrize(
    ("move", "message"),
    [
        (Move("ghost", SLICE, WHOLE), "moves 'ghost', which is not running"),
        (Move("p1", SLICE, OTHER), "which is not where it runs"),
        (Move("p1", (), WHOLE), "with 0 replicas, not 1"),
        (Move("p1", OTHER + OTHER, WHOLE), "with 2 replicas, not 1"),
        (Move("p1", ((Slot("z", 0),),), WHOLE), "no such node"),
        (Move("p1", ((Slot("m", 0, "3g.40gb", 0),),), WHOLE), "not free"),
    ],
)
def test_a_move_that_cannot_be_applied_stops_the_replay(move: Move, message: str) -> None:
    planner = scripted({0.0: Plan(binds=(Bind("p1", WHOLE),)), 20.0: Plan(moves=(move,))})
    with pytest.raises(PlanViolation, match=message):
        replay(scenario([service()]), planner)


def test_a_second_move_while_one_is_under_way_stops_the_replay() -> None:
    planner = _moved_at_20({30.0: Plan(moves=(Move("p1", OTHER, SLICE),))})
    with pytest.raises(PlanViolation, match="whose previous move is still under way"):
        replay(scenario([service()]), planner)
