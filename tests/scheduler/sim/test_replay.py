"""The virtual-time replay, driven by fake planners: completions, checkpoints and lost work, interruptions,
reconfigurations, the output's shape, plan checks and determinism."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from scheduler.core.model.plan import Bind, Evict, Plan, Reconfigure, Reject, Waiting
from scheduler.core.model.snapshot import Slot
from scheduler.sim import PlanViolation, parse_scenario, render_timeline, replay
from tests.scheduler.sim.fakes import first_fit, recording, scripted

replay_module = importlib.import_module("scheduler.sim.replay")  # the package exports the function under that name
BALANCED = [["1g.10gb", 0], ["1g.10gb", 1], ["2g.20gb", 2], ["3g.40gb", 4]]


def scenario(events: list[dict[str, Any]], **top: Any) -> Any:
    doc: dict[str, Any] = {
        "name": "test",
        "cycle_s": 10,
        "until": 200,
        "cluster": {
            "nodes": [
                {"name": "a", "gpu_model": "A100-SXM4-80GB", "gpus": 2, "price_per_gpu_hour": 3.6},
                {"name": "b", "gpu_model": "A100-SXM4-80GB", "gpus": 2, "tier": "spot"},
            ]
        },
        "teams": [{"name": "t", "guaranteed_gpus": 2}],
        "events": events,
    }
    doc.update(top)
    if doc["until"] is None:
        del doc["until"]
    return parse_scenario(doc, source="test.json")


def job(job_id: str, t: float = 0, **keys: Any) -> dict[str, Any]:
    return {"t": t, "submit": {"id": job_id, "team": "t", "gpus": 1, **keys}}


def events_of(result: Any, *types: str) -> list[dict[str, Any]]:
    return [e for e in result.events if not types or e["type"] in types]


def brief(result: Any, *types: str) -> list[tuple[Any, ...]]:
    return [(e["t"], e["type"], e.get("job", e.get("node"))) for e in events_of(result, *types)]


# -- completions ------------------------------------------------------------------------------------------------


def test_a_job_completes_once_its_work_is_done() -> None:
    result = replay(scenario([job("j1", duration_s=100)]), first_fit)
    assert brief(result) == [(0, "bound", "j1"), (100, "completed", "j1")]
    assert result.final["jobs"]["j1"] == {"state": "completed", "preemptions": 0, "work_done_s": 100}
    assert result.metrics["completed"] == 1


def test_work_starts_at_the_bind_not_at_the_submit() -> None:
    result = replay(scenario([job("j1", t=5, duration_s=100)]), first_fit)
    assert brief(result) == [(10, "bound", "j1"), (110, "completed", "j1")]


def test_capacity_freed_between_ticks_is_used_at_the_next_tick() -> None:
    events = [job("j1", gpus=2, duration_s=95), job("j2", gpus=2), job("j3", gpus=2, duration_s=20)]
    result = replay(scenario(events), first_fit)
    assert brief(result, "bound", "completed") == [
        (0, "bound", "j1"),
        (0, "bound", "j2"),
        (95, "completed", "j1"),
        (100, "bound", "j3"),
        (120, "completed", "j3"),
    ]


def test_a_job_without_duration_runs_until_the_end() -> None:
    result = replay(scenario([job("j1")]), first_fit)
    assert result.final["t"] == 200
    assert result.final["jobs"]["j1"]["state"] == "running"
    assert result.final["jobs"]["j1"]["work_done_s"] == 200


# -- checkpoints and lost work ----------------------------------------------------------------------------------


def test_automatic_checkpoints_every_interval_of_running_time() -> None:
    result = replay(scenario([job("j1", duration_s=100, checkpoint_interval_s=30)]), first_fit)
    assert brief(result, "checkpointed", "completed") == [
        (30, "checkpointed", "j1"),
        (60, "checkpointed", "j1"),
        (90, "checkpointed", "j1"),
        (100, "completed", "j1"),
    ]
    assert [e["work_done_s"] for e in events_of(result, "checkpointed")] == [30, 60, 90]


def test_no_checkpoint_at_the_moment_of_completion() -> None:
    result = replay(scenario([job("j1", duration_s=100, checkpoint_interval_s=50)]), first_fit)
    assert brief(result, "checkpointed", "completed") == [(50, "checkpointed", "j1"), (100, "completed", "j1")]


def _evict_at(t: float, job_id: str, by: str | None = "x", reason: str = "priority") -> Any:
    return scripted({t: Plan(evictions=(Evict(job_id, reason, by),))}, fallback=first_fit)


def test_preemption_loses_the_work_since_the_last_checkpoint() -> None:
    events = [job("j1", duration_s=100, checkpoint_interval_s=30), {"t": 71, "observe": "after"}]
    result = replay(scenario(events), _evict_at(70, "j1"))
    assert events_of(result, "preempted") == [
        {"t": 70, "type": "preempted", "job": "j1", "by": "x", "reason": "priority"}
    ]
    assert events_of(result, "requeued") == [{"t": 70, "type": "requeued", "job": "j1"}]
    after = result.observations[0]["jobs"]["j1"]
    assert after["state"] == "pending"
    assert after["preemptions"] == 1
    assert after["work_done_s"] == 60  # 10 s since the checkpoint at 60 are lost
    assert "preempted by x (priority)" in after["reason"]
    # Bound again by the next tick (80) with 60 s saved: 40 s to go.
    assert brief(result, "bound", "completed") == [(0, "bound", "j1"), (80, "bound", "j1"), (120, "completed", "j1")]
    assert result.metrics["lost_gpu_hours"] == round(10 / 3600, 6)


def test_without_checkpoints_a_preemption_loses_the_whole_run() -> None:
    result = replay(scenario([job("j1", duration_s=100)]), _evict_at(70, "j1"))
    assert brief(result, "bound", "completed") == [(0, "bound", "j1"), (80, "bound", "j1"), (180, "completed", "j1")]
    assert result.metrics["lost_gpu_hours"] == round(70 / 3600, 6)


def test_a_checkpoint_event_saves_the_work_and_restarts_the_interval() -> None:
    events = [job("j1", duration_s=100, checkpoint_interval_s=30), {"t": 45, "checkpoint": "j1"}]
    result = replay(scenario(events), first_fit)
    assert brief(result, "checkpointed") == [
        (30, "checkpointed", "j1"),
        (45, "checkpointed", "j1"),
        (75, "checkpointed", "j1"),
    ]


def test_a_checkpoint_event_on_a_job_that_is_not_running_does_nothing() -> None:
    events = [job("j1", t=1, duration_s=100), {"t": 2, "checkpoint": "j1"}]
    assert brief(replay(scenario(events), first_fit), "checkpointed") == []


def test_the_snapshot_carries_start_and_last_checkpoint() -> None:
    planner = recording(first_fit)
    replay(scenario([job("j1", duration_s=100, checkpoint_interval_s=30)]), planner)
    running = {now: snap.running for now, snap in planner.calls}
    assert running[0] == ()
    assert (running[20][0].started_at, running[20][0].last_checkpoint_at) == (0, None)
    assert (running[40][0].started_at, running[40][0].last_checkpoint_at) == (0, 30)


# -- cancel, finish, set_priority -------------------------------------------------------------------------------


def test_cancel_and_finish() -> None:
    events = [
        job("run", gpus=2, duration_s=100),
        job("other", gpus=2, duration_s=100),
        job("wait", gpus=2, duration_s=100),  # no room: pending
        {"t": 30, "cancel": "wait"},
        {"t": 40, "finish": "run"},
        {"t": 50, "cancel": "run"},  # already over: nothing happens
    ]
    result = replay(scenario(events, until=400), first_fit)
    assert brief(result, "cancelled", "completed") == [
        (30, "cancelled", "wait"),
        (40, "completed", "run"),
        (100, "completed", "other"),
    ]
    assert result.final["jobs"]["wait"]["state"] == "cancelled"
    assert result.final["jobs"]["run"] == {"state": "completed", "preemptions": 0, "work_done_s": 40}
    assert result.metrics["completed"] == 2


def test_cancel_of_a_running_job_frees_its_gpus() -> None:
    events = [job("j1", gpus=2), job("j2", gpus=2), job("j3", gpus=2, duration_s=10), {"t": 33, "cancel": "j1"}]
    result = replay(scenario(events), first_fit)
    assert (40, "bound", "j3") in brief(result, "bound")


def test_set_priority_and_rank_reach_the_snapshot() -> None:
    planner = recording(first_fit)
    events = [
        job("j1", gpus=2),
        job("j2", gpus=2),
        job("j3", gpus=2),
        {"t": 15, "set_priority": {"job": "j3", "priority": "high"}},
        {"t": 15, "set_priority": {"job": "j1", "rank": 4}},
    ]
    replay(scenario(events, until=30), planner)
    snapshots = dict(planner.calls)
    assert snapshots[10].pending[0].priority == "normal"
    assert snapshots[20].pending[0].priority == "high"
    assert snapshots[20].running[0].job.rank == 4


# -- interruption and nodes -------------------------------------------------------------------------------------


def test_interrupt_drains_then_loses_the_node() -> None:
    planner = recording(first_fit)
    events = [
        job("j1", gpus=2, duration_s=100, checkpoint_interval_s=25),
        {"t": 20, "interrupt": {"node": "a", "notice_s": 30}},
        job("j2", t=21, gpus=2, duration_s=10),
        {"t": 35, "observe": "during notice"},
    ]
    result = replay(scenario(events), planner)
    during = result.observations[0]
    assert during["nodes"]["a"]["state"] == "draining"
    assert during["jobs"]["j1"]["state"] == "running"  # work continues during the notice
    assert during["jobs"]["j2"]["placements"] == [{"node": "b", "gpus": [0, 1]}]  # nothing new binds on a
    assert [n.schedulable for n in dict(planner.calls)[30].nodes] == [False, True]
    assert events_of(result, "draining") == [
        {"t": 20, "type": "draining", "node": "a", "reason": "interrupt", "gone_at": 50}
    ]
    assert events_of(result, "preempted")[0] == {
        "t": 50,
        "type": "preempted",
        "job": "j1",
        "by": None,
        "reason": "node-lost",
    }
    # The node is gone before the tick at 50: j1 is requeued and bound on b as soon as b is free.
    assert brief(result, "requeued", "bound") == [
        (0, "bound", "j1"),
        (30, "bound", "j2"),
        (50, "requeued", "j1"),
        (50, "bound", "j1"),
    ]
    assert [n.name for n in dict(planner.calls)[50].nodes] == ["b"]
    assert result.final["nodes"]["a"]["state"] == "gone"
    assert result.final["jobs"]["j1"]["work_done_s"] == 100
    assert result.metrics["lost_gpu_hours"] == round(2 * 0 / 3600, 6)  # checkpointed at 25 and 50


@pytest.mark.parametrize("loss", [{"remove_node": "b"}, {"interrupt": {"node": "b", "notice_s": 10}}])
def test_a_job_requeued_by_a_lost_node_resumes_ahead_of_its_teams_ranked_work(loss: dict[str, Any]) -> None:
    """As the loop's snapshot marks it (Job.resumes): the engine binds the requeued job first within its priority,
    though the lead ranked the rival first."""
    events = [
        job("lost", gpus=2, tier="spot-ok", duration_s=1000),
        job("filler", gpus=2, duration_s=100),
        job("rival", t=10, gpus=2, rank=-5, duration_s=1000),
        {"t": 40, **loss},
    ]
    result = replay(scenario(events, until=120, teams=[{"name": "t", "guaranteed_gpus": 4}]))
    assert sorted((e["t"], e["job"]) for e in events_of(result, "bound")) == [(0, "filler"), (0, "lost"), (100, "lost")]
    assert result.final["jobs"]["rival"]["state"] == "pending"


def test_interrupt_without_notice_and_remove_node_evict_at_once() -> None:
    events = [
        job("j1", gpus=2, duration_s=100),
        job("j2", gpus=2, duration_s=100),
        {"t": 15, "interrupt": {"node": "a", "notice_s": 0}},
        {"t": 16, "remove_node": "b"},
    ]
    result = replay(scenario(events), first_fit)
    assert brief(result, "preempted") == [(15, "preempted", "j1"), (16, "preempted", "j2")]
    assert {n["state"] for n in result.final["nodes"].values()} == {"gone"}
    assert result.final["jobs"]["j1"]["state"] == "pending"


def test_add_node_brings_capacity() -> None:
    events = [
        {"t": 30, "add_node": {"name": "c", "gpu_model": "H100-SXM5-80GB", "gpus": 4}},
        job("j1", t=30, gpus=4, duration_s=50),
    ]
    result = replay(scenario(events), first_fit)
    assert events_of(result, "bound") == [
        {"t": 30, "type": "bound", "job": "j1", "placements": [{"node": "c", "gpus": [0, 1, 2, 3]}]}
    ]


def test_set_quota_changes_the_team_in_the_next_snapshot() -> None:
    planner = recording(first_fit)
    events = [{"t": 15, "set_quota": {"name": "t", "guaranteed_gpus": 1, "weight": 3}}]
    result = replay(scenario(events, until=20), planner)
    assert dict(planner.calls)[20].teams[0].weight == 3
    assert result.final["teams"]["t"]["guaranteed_gpus"] == 1


# -- MIG reconfiguration ----------------------------------------------------------------------------------------


def test_reconfiguration_takes_effect_at_ready_at() -> None:
    change = Reconfigure(node="a", gpu=1, old=(), new=tuple((p, s) for p, s in BALANCED), ready_at=70)
    planner = recording(scripted({10: Plan(reconfigurations=(change,))}, fallback=first_fit))
    events = [job("i1", t=20, gpus=None, mig_profile="3g.40gb", duration_s=30), {"t": 40, "observe": "meanwhile"}]
    events[0]["submit"].pop("gpus")
    result = replay(scenario(events), planner)
    assert events_of(result, "draining", "reconfigured") == [
        {"t": 10, "type": "draining", "node": "a", "gpu": 1, "reason": "reconfigure", "ready_at": 70},
        {"t": 70, "type": "reconfigured", "node": "a", "gpu": 1, "old": [], "new": BALANCED},
    ]
    node_at = {now: snap.nodes[0] for now, snap in planner.calls}
    assert node_at[40].reconfiguring_until == 70
    assert node_at[40].mig[1] == change.new
    assert node_at[70].reconfiguring_until is None
    assert result.observations[0]["nodes"]["a"] == {"state": "reconfiguring", "mig": {"1": BALANCED}}
    assert events_of(result, "bound") == [
        {
            "t": 70,
            "type": "bound",
            "job": "i1",
            "placements": [{"node": "a", "gpu": 1, "mig_profile": "3g.40gb", "start": 4}],
        }
    ]
    assert result.final["teams"]["t"]["allocated_gpus"] == 0.0
    assert result.final["jobs"]["i1"]["state"] == "completed"


def test_an_immediate_reconfiguration_is_reported_at_once() -> None:
    change = Reconfigure(node="b", gpu=0, old=(), new=(("7g.80gb", 0),), ready_at=10)
    result = replay(scenario([]), scripted({10: Plan(reconfigurations=(change,))}))
    assert events_of(result, "draining", "reconfigured") == [
        {"t": 10, "type": "reconfigured", "node": "b", "gpu": 0, "old": [], "new": [["7g.80gb", 0]]}
    ]


# -- plan checks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (Plan(evictions=(Evict("ghost", "priority", "x"),)), "evicts 'ghost', which is not running"),
        (Plan(binds=(Bind("j1", ((Slot("a", 0),),)),)), "binds 'j1', which is not pending"),
        (Plan(binds=(Bind("j2", ((Slot("a", 0),),)),)), "not free"),
        (Plan(binds=(Bind("j2", ((Slot("z", 0),),)),)), "no such node"),
        (Plan(binds=(Bind("j2", ()),)), "with 0 replicas, not 1"),
        (Plan(rejections=(Reject("j1", "no"),)), "rejects 'j1', which is not pending"),
        (Plan(reconfigurations=(Reconfigure("a", 0, (), (("7g.80gb", 0),), 50),)), "busy"),
        (Plan(reconfigurations=(Reconfigure("a", 1, (("7g.80gb", 0),), (), 50),)), "is not the current"),
        (Plan(reconfigurations=(Reconfigure("a", 5, (), (), 50),)), "no such GPU"),
        (Plan(reconfigurations=(Reconfigure("a", 1, (), (("3g.40gb", 2),), 50),)), "cannot start"),
    ],
)
def test_a_plan_that_cannot_be_applied_stops_the_replay(plan: Plan, message: str) -> None:
    events = [job("j1", duration_s=100), job("j2", t=15, duration_s=100)]
    with pytest.raises(PlanViolation, match=message) as caught:
        replay(scenario(events), scripted({20: plan}, fallback=first_fit))
    assert str(caught.value).startswith("test.json: cycle at t=20: ")


def test_no_bind_on_a_draining_or_reconfiguring_node() -> None:
    events = [job("j1", t=15), {"t": 12, "interrupt": {"node": "a", "notice_s": 100}}]
    with pytest.raises(PlanViolation, match="takes no new work"):
        replay(scenario(events), scripted({20: Plan(binds=(Bind("j1", ((Slot("a", 0),),)),))}))
    change = Reconfigure(node="b", gpu=0, old=(), new=(("7g.80gb", 0),), ready_at=100)
    plan = scripted({10: Plan(reconfigurations=(change,)), 20: Plan(binds=(Bind("j1", ((Slot("b", 1),),)),))})
    with pytest.raises(PlanViolation, match="being reconfigured"):
        replay(scenario([job("j1", t=15)]), plan)


# -- ordering at one instant ------------------------------------------------------------------------------------


def test_events_at_a_tick_apply_before_the_cycle_and_observe_sees_them_first() -> None:
    events = [job("j1", t=10, duration_s=100), {"t": 10, "observe": "same instant"}]
    result = replay(scenario(events), first_fit)
    assert result.observations[0]["jobs"]["j1"] == {
        "state": "pending",
        "reason": "submitted; waits for the next scheduling cycle",
        "preemptions": 0,
        "work_done_s": 0,
    }
    assert brief(result, "bound") == [(10, "bound", "j1")]


def test_a_completion_applies_before_scenario_events_at_the_same_time() -> None:
    result = replay(scenario([job("j1", duration_s=50), {"t": 50, "observe": "done?"}]), first_fit)
    assert result.observations[0]["jobs"]["j1"]["state"] == "completed"


# -- output shape -----------------------------------------------------------------------------------------------


def test_observation_shape() -> None:
    planner = scripted(
        {},
        fallback=lambda snap, policy, now: Plan(
            binds=first_fit(snap, policy, now).binds,
            waiting=tuple(
                Waiting(j.id, i + 1, i + 1, "waiting for 2 GPUs", eta_s=30.0)
                for i, j in enumerate(j for j in snap.pending if j.id == "j3")
            ),
        ),
    )
    events = [job("j1", gpus=2), job("j2", gpus=2), job("j3", gpus=2), {"t": 5, "observe": "now"}]
    doc = scenario(events)
    result = replay(doc, planner)
    assert set(result.as_dict()) == {"name", "observations", "final", "events", "metrics"}
    now = result.observations[0]
    assert list(now) == ["t", "label", "jobs", "nodes", "teams"]
    assert now["t"] == 5 and now["label"] == "now"
    assert now["jobs"]["j1"] == {
        "state": "running",
        "placements": [{"node": "a", "gpus": [0, 1]}],
        "preemptions": 0,
        "work_done_s": 5,
    }
    assert now["jobs"]["j3"] == {
        "state": "pending",
        "queue_position": 1,
        "reason": "waiting for 2 GPUs",
        "eta_s": 25,  # estimated 30 s at the cycle at t=0; observed at t=5
        "preemptions": 0,
        "work_done_s": 0,
    }
    assert now["nodes"] == {"a": {"state": "ready", "mig": {}}, "b": {"state": "ready", "mig": {}}}
    assert now["teams"] == {"t": {"allocated_gpus": 4.0, "guaranteed_gpus": 2, "borrowed_gpus": 2.0}}
    assert list(result.final) == ["t", "jobs", "nodes", "teams"]
    assert set(result.metrics) == {
        "allocation_ratio",
        "effective_utilization",
        "completed",
        "lost_gpu_hours",
        "cost",
        "moves",
    }


def test_placements_of_mig_shares_and_gangs() -> None:
    nodes = [
        {"name": "m", "gpu_model": "A100-SXM4-80GB", "gpus": 1, "mig": "all-balanced"},
        {"name": "s", "gpu_model": "A100-PCIE-40GB", "gpus": 2, "sharing": True},
    ]
    events = [
        {"t": 0, "submit": {"id": "i1", "team": "t", "mig_profile": "2g.20gb"}},
        {"t": 0, "submit": {"id": "f1", "team": "t", "gpu_milli": 250}},
        {"t": 0, "submit": {"id": "g1", "team": "t", "gpus": 1, "replicas": 2}},
    ]
    result = replay(scenario(events, cluster={"nodes": nodes}), first_fit)
    jobs = result.final["jobs"]
    assert jobs["i1"]["placements"] == [{"node": "m", "gpu": 0, "mig_profile": "2g.20gb", "start": 2}]
    assert jobs["f1"]["placements"] == [{"node": "s", "gpu": 0, "gpu_milli": 250}]
    assert jobs["g1"]["state"] == "pending"  # only one whole GPU left: the gang waits whole
    assert result.final["teams"]["t"]["allocated_gpus"] == round(2 / 7 + 0.25, 4)
    assert result.final["nodes"]["m"]["mig"] == {"0": BALANCED}


def test_final_is_at_until_or_at_the_last_change() -> None:
    assert replay(scenario([job("j1", duration_s=30)]), first_fit).final["t"] == 200
    result = replay(scenario([job("j1", duration_s=35), {"t": 12, "observe": "x"}], until=None), first_fit)
    assert result.final["t"] == 35
    result = replay(scenario([{"t": 150, "observe": "late"}], until=None), first_fit)
    assert result.final["t"] == 150
    assert replay(scenario([], until=None), first_fit).final["t"] == 0


def test_a_replay_that_never_settles_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "MAX_CYCLES", 30)

    def churn(snapshot: Any, policy: Any, now: float) -> Plan:
        evictions = tuple(Evict(r.job.id, "priority", None) for r in snapshot.running)
        return Plan(evictions=evictions, binds=first_fit(snapshot, policy, now).binds if not evictions else ())

    with pytest.raises(PlanViolation, match="no end after 30 cycles"):
        replay(scenario([job("j1", duration_s=1000)], until=None), churn)


# -- metrics ----------------------------------------------------------------------------------------------------


def test_metrics() -> None:
    # 4 GPUs for 200 s; j1 holds 1 GPU on node a (3.6 per GPU-hour) for 50 s, of which 20 s are lost.
    result = replay(scenario([job("j1", duration_s=30)], until=200), _evict_at(20, "j1"))
    assert brief(result, "bound", "completed") == [(0, "bound", "j1"), (30, "bound", "j1"), (60, "completed", "j1")]
    assert result.metrics == {
        "allocation_ratio": round(50 / 800, 6),
        "effective_utilization": round(30 / 800, 6),
        "completed": 1,
        "lost_gpu_hours": round(20 / 3600, 6),
        "cost": round(3.6 * 50 / 3600, 6),
        "moves": 0,
    }


def test_a_preempted_job_is_remembered_for_the_ping_pong_window_only() -> None:
    planner = recording(_evict_at(20, "j1", by="j9"))
    replay(scenario([job("j1", duration_s=500)], policy={"ping_pong_window_s": 50}), planner)
    windows = {now: snap.preemptions for now, snap in planner.calls}
    assert [(p.victim, p.by, p.at) for p in windows[30]] == [("j1", "j9", 20)]
    assert windows[70] == ()


# -- determinism and the timeline ---------------------------------------------------------------------------------


def _busy_scenario() -> Any:
    events = [job(f"j{i}", t=i * 3, duration_s=40 + i * 7, checkpoint_interval_s=15) for i in range(10)]
    events += [{"t": 33, "interrupt": {"node": "b", "notice_s": 20}}, {"t": 60, "observe": "mid"}]
    return scenario(events, until=400)


def test_the_same_scenario_gives_the_same_json() -> None:
    first = json.dumps(replay(_busy_scenario(), first_fit).as_dict(), sort_keys=False)
    second = json.dumps(replay(_busy_scenario(), first_fit).as_dict(), sort_keys=False)
    assert first == second


def test_the_timeline_lists_events_observations_and_metrics() -> None:
    text = render_timeline(replay(_busy_scenario(), first_fit).as_dict())
    assert text.startswith("Scenario: test\n")
    assert "t=      0  bound j0 on a GPU 0" in text
    assert "draining b (spot notice), gone at t=53" in text
    assert "── observe: mid ──" in text
    assert "── final state ──" in text
    assert text.splitlines()[-1].startswith("metrics: allocation ratio ")


def test_the_timeline_shows_mig_shares_reconfigurations_and_rejections() -> None:
    nodes = [
        {"name": "m", "gpu_model": "A100-SXM4-80GB", "gpus": 2, "mig": {"0": "all-balanced"}},
        {"name": "s", "gpu_model": "A100-PCIE-40GB", "gpus": 1, "sharing": True},
    ]
    events = [
        {"t": 0, "submit": {"id": "i1", "team": "t", "mig_profile": "2g.20gb"}},
        {"t": 0, "submit": {"id": "f1", "team": "t", "gpu_milli": 250}},
        job("big", gpus=9),
        {"t": 150, "observe": "late"},
    ]
    change = Reconfigure(node="m", gpu=1, old=(), new=(("7g.80gb", 0),), ready_at=50)
    planner = scripted({10: Plan(reconfigurations=(change,))}, fallback=first_fit)
    text = render_timeline(replay(scenario(events, cluster={"nodes": nodes}), planner).as_dict())
    assert "bound i1 on m GPU 0 2g.20gb@2" in text
    assert "bound f1 on s GPU 0 (250 milli-GPU)" in text
    assert "rejected big: needs 9 GPUs on one node; the largest has 2" in text
    assert "draining m GPU 1 for a MIG reconfiguration, ready at t=50" in text
    assert "reconfigured m GPU 1: MIG off → 7g.80gb@0" in text
    assert "node m: ready, MIG GPU 0: 1g.10gb@0,1g.10gb@1,2g.20gb@2,3g.40gb@4; GPU 1: 7g.80gb@0" in text
    late = text.index("── observe: late ──")
    assert late > text.index("reconfigured m GPU 1")  # an observation after the last event still shows
    assert "job big: rejected — needs 9 GPUs on one node" in text


def test_planners_by_name() -> None:
    from scheduler.sim import PLANNERS, UnknownPlanner, planner_named
    from scheduler.sim.planners import microcosm

    assert planner_named("microcosm") is microcosm is PLANNERS["microcosm"]
    with pytest.raises(UnknownPlanner, match="unknown policy 'fifo'; known policies: microcosm"):
        planner_named("fifo")
