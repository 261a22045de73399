"""What the engine would do with a job submitted now (scheduler.core.planning.preview) and the order in which it tries a
fleet's GPU models and tiers (scheduler.core.placement.offers)."""

from __future__ import annotations

import pytest

from scheduler.core import PreviewOutcome, offers, plan_cycle, preview
from scheduler.core.model.demand import Demand
from scheduler.core.model.plan import Bind, Evict, Plan, Reconfigure, Reject
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Node, Request, Running, Slot, Snapshot, Team
from scheduler.core.model.vocabulary import CapacityTier, EvictionReason, JobKind, JobTier, Priority
from scheduler.core.planning.preview import PREVIEW_JOB, _applied

A100_80 = "A100-SXM4-80GB"
A100_40 = "A100-PCIE-40GB"
H100 = "H100-SXM5-80GB"
POLICY = Policy()  # cycle 10 s, hysteresis 3 cycles, a MIG reconfiguration 300 s
NOW = 10_000.0
ROOMY = Team(name="t", guaranteed=(("any", 64.0),), burst=(("any", 64.0),))


def _snapshot(nodes: list[Node], running: tuple[Running, ...] = (), team: Team = ROOMY) -> Snapshot:
    return Snapshot(nodes=tuple(nodes), teams=(team,), running=running)


def _job(request: Request, **kw: object) -> Job:
    return Job(id="asked", team="t", request=request, **kw)  # type: ignore[arg-type]


def _busy(node: str, gpus: int, job_id: str = "r", **kw: object) -> Running:
    job = Job(id=job_id, team="t", request=Request(gpus=gpus), **kw)  # type: ignore[arg-type]
    return Running(job=job, slots=(tuple(Slot(node, g) for g in range(gpus)),), started_at=NOW - 60)


def test_an_idle_fit_starts_now_where_the_plan_binds_it() -> None:
    snapshot = _snapshot([Node("n1", A100_80, 8)])
    answer = preview(snapshot, _job(Request(gpus=2)), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.STARTS and answer.after_s == 0.0 and answer.evictions == 0
    assert answer.slots == ((Slot("n1", 0), Slot("n1", 1)),)


def test_a_job_the_engine_rejects_never_runs_with_its_reason() -> None:
    answer = preview(_snapshot([Node("n1", A100_80, 8)]), _job(Request(gpus=16)), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.NEVER and "no node in the cluster can hold one replica" in answer.reason
    assert answer.slots == ()


def test_a_slice_no_layout_has_starts_after_the_hysteresis_and_the_reconfiguration() -> None:
    snapshot = _snapshot([Node("n1", A100_80, 1)])  # MIG off, idle: the engine cuts it once the demand is aged
    answer = preview(snapshot, _job(Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.AFTER_RECONFIGURATION
    assert answer.slots[0][0].mig_profile == "1g.10gb" and answer.slots[0][0].node == "n1"
    hysteresis = POLICY.reconfiguration_hysteresis_cycles * POLICY.cycle_s
    assert hysteresis + POLICY.mig_reconfigure_s <= answer.after_s <= hysteresis + POLICY.mig_reconfigure_s + 20


def test_whole_gpus_behind_running_work_wait_with_the_engines_estimate() -> None:
    snapshot = _snapshot([Node("n1", A100_80, 8)], running=(_busy("n1", 8, duration_s=600.0),))
    answer = preview(snapshot, _job(Request(gpus=4)), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.WAITS and answer.reason.startswith("waiting for 4 A100")
    assert answer.eta_s == pytest.approx(540.0)  # the running job's expected end: started 60 s ago, 600 s long


def test_a_slice_on_a_full_fleet_waits_after_looking_ahead_a_few_cycles() -> None:
    snapshot = _snapshot([Node("n1", A100_80, 1)], running=(_busy("n1", 1, duration_s=3600.0),))
    answer = preview(snapshot, _job(Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.WAITS and "1g.10gb" in answer.reason
    # From now, whatever cycle the look-ahead stopped at: the GPU is empty when the whole-GPU job ends (+3540) and
    # then takes the reconfiguration that makes the slice (+300); the slice cannot come sooner.
    assert answer.eta_s == pytest.approx(3540.0 + POLICY.mig_reconfigure_s)


def test_a_slice_held_by_quota_waits_at_once() -> None:
    broke = Team(name="t", guaranteed=(("any", 0.0),), burst=(("any", 0.0),))
    snapshot = _snapshot([Node("n1", A100_80, 1, mig=((("1g.10gb", 0),),))], team=broke)
    answer = preview(snapshot, _job(Request(mig_profile="1g.10gb"), kind=JobKind.INFERENCE), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.WAITS and "within quota" in answer.reason and answer.eta_s is None


def test_production_counts_the_work_it_stops() -> None:
    victim = _busy("n1", 8, priority=Priority.LOW, preemptible=True)
    snapshot = _snapshot([Node("n1", A100_80, 8)], running=(victim,))
    answer = preview(snapshot, _job(Request(gpus=8), priority=Priority.PRODUCTION), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.STARTS and answer.evictions == 1


def test_a_plan_is_applied_as_the_loop_would_apply_it() -> None:
    pending = (_job(Request(gpus=1)), Job(id="bad", team="t", request=Request(gpus=1)))
    nodes = (
        Node("n1", A100_80, 2),
        Node("n2", A100_80, 1, reconfiguring_until=NOW + 5),  # done by the time the plan is applied
        Node("n3", A100_80, 1, reconfiguring_until=NOW + 500),  # still under way
    )
    evicted = _busy("n1", 1, job_id="victim")
    state = Snapshot(nodes=nodes, teams=(ROOMY,), running=(evicted,), pending=pending)
    new = (("7g.80gb", 0),)
    plan = Plan(
        evictions=(Evict("victim", EvictionReason.PRIORITY),),
        reconfigurations=(Reconfigure("n1", 1, (), new, NOW + 300),),
        binds=(Bind("asked", ((Slot("n1", 0),),)),),
        rejections=(Reject("bad", "no"),),
    )
    after = _applied(state, plan, NOW + 300)
    assert [n.mig for n in after.nodes] == [((), new), (), ()]
    assert [n.reconfiguring_until for n in after.nodes] == [None, None, NOW + 500]
    assert [r.job.id for r in after.running] == ["asked"] and after.running[0].started_at == NOW + 300
    assert [j.id for j in after.pending] == ["victim"]


def test_the_preview_never_collides_with_a_stored_job() -> None:
    """The asked job gets an id no primary key has, so a pending job with the asker's id is still planned."""
    twin = Job(id="asked", team="t", request=Request(gpus=8), submitted_at=NOW - 100)
    snapshot = Snapshot(nodes=(Node("n1", A100_80, 8),), teams=(ROOMY,), pending=(twin,))
    answer = preview(snapshot, _job(Request(gpus=1)), POLICY, NOW)
    assert answer.outcome == PreviewOutcome.WAITS  # the twin, ahead in the queue, takes the server
    plan = plan_cycle(snapshot, POLICY, NOW)
    assert [b.job for b in plan.binds] == ["asked"] and PREVIEW_JOB != "asked"


# -- offers ------------------------------------------------------------------------------------------------------


def test_offers_follow_tier_then_kind_then_the_smaller_gpu() -> None:
    nodes = [
        Node("h-od", H100, 8, tier=CapacityTier.ON_DEMAND),
        Node("a80-res", A100_80, 8, tier=CapacityTier.RESERVED),
        Node("a40-res", A100_40, 4, tier=CapacityTier.RESERVED),
        Node("a80-spot", A100_80, 8, tier=CapacityTier.SPOT),
        Node("a80-spot-2", A100_80, 8, tier=CapacityTier.SPOT),  # one offer per model and tier
        Node("empty", H100, 0, tier=CapacityTier.RESERVED),  # no GPUs: nothing to offer
    ]
    service = _job(Request(memory_gib=15.0), kind=JobKind.INFERENCE)
    found = [(o.gpu_model, str(o.tier), o.demand) for o in offers(service, nodes, POLICY)]
    assert found == [
        (A100_40, "reserved", Demand.mig("3g.20gb", memory_mib=15360)),
        (A100_80, "reserved", Demand.mig("1g.20gb", memory_mib=15360)),
        (H100, "on-demand", Demand.mig("1g.20gb", memory_mib=15360)),
        (A100_80, "spot", Demand.mig("1g.20gb", memory_mib=15360)),
    ]
    assert [round(o.gpu_equivalents, 3) for o in offers(service, nodes, POLICY)] == [0.429, 0.143, 0.143, 0.143]
    production = _job(Request(gpus=2), priority=Priority.PRODUCTION, tier=JobTier.SPOT_OK)
    assert [(o.gpu_model, str(o.tier)) for o in offers(production, nodes, POLICY)] == [
        (A100_40, "reserved"),
        (A100_80, "reserved"),
        (H100, "on-demand"),
    ]  # never spot for production
    assert {o.gpu_equivalents for o in offers(production, nodes, POLICY)} == {2.0}


def test_a_share_offers_its_fraction_of_a_gpu() -> None:
    (offer,) = offers(_job(Request(gpu_milli=250)), [Node("n1", "T4", 4)], POLICY)
    assert offer.gpu_equivalents == 0.25 and offer.tier == CapacityTier.ON_DEMAND
    constrained = _job(Request(gpus=1), gpu_model="H100")  # a GPU model it did not ask for offers nothing
    assert offers(constrained, [Node("n1", A100_80, 8), Node("n2", H100, 8)], POLICY)[0].gpu_model == H100
    assert len(offers(constrained, [Node("n1", A100_80, 8), Node("n2", H100, 8)], POLICY)) == 1
