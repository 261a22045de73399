"""How a node changes its MIG layout decides when a reconfiguration is ready and whether it counts against the
cycle's budget (reconfiguration rules 5 and 6): the GPU Operator's relabel flow (MIG Manager: minutes, a drain, one
node per call within the budget) or a DRA driver's dynamic MIG, where the instance is made when the claim that
allocates it is prepared (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_state.go), so the
change is ready at once and costs nothing the budget bounds. An A100 under dynamic MIG cannot change its GPUs' MIG
mode without a reset (nvlib.go ``isDynamicMIGCapable``): only its MIG-enabled GPUs change, never to MIG off."""

from __future__ import annotations

import pytest

from scheduler.core import plan_cycle
from scheduler.core.model.cluster_state import ClusterState
from scheduler.core.model.demand import Demand
from scheduler.core.model.policy import Policy
from scheduler.core.model.snapshot import Job, Request, Snapshot
from scheduler.core.model.vocabulary import JobKind, ReconfigurationMode
from scheduler.core.rules.reconfiguration import DYNAMIC_READY_S, nodes_per_cycle, plan_reconfiguration, reconfigure_s
from tests.scheduler.properties.builders import A100, H100, NOW, job, node, snapshot, state_of, team

POLICY = Policy()
OLD = NOW - 100  # pending 10 cycles: past the hysteresis
DYNAMIC = ReconfigurationMode.DYNAMIC
FIXED = ReconfigurationMode.DYNAMIC_FIXED_MODE


def _state(*nodes) -> ClusterState:
    return ClusterState(Snapshot(nodes=tuple(nodes), teams=(), running=()))


def _mig(job_id: str, profile: str) -> tuple[Job, Demand]:
    found = Job(id=job_id, team="t", request=Request(mig_profile=profile), kind=JobKind.INFERENCE, submitted_at=OLD)
    return found, Demand.mig(profile)


def _whole(job_id: str) -> tuple[Job, Demand]:
    found = Job(id=job_id, team="t", request=Request(gpus=1), kind=JobKind.TRAINING, submitted_at=OLD)
    return found, Demand.whole(1)


def test_a_dynamic_node_s_change_is_ready_at_once_a_relabelled_one_after_the_policy_s_time() -> None:
    relabel, dynamic = (
        node("r", H100, 1, mig="all-1g.10gb"),
        node("d", H100, 1, mig="all-1g.10gb", reconfiguration=DYNAMIC),
    )
    assert reconfigure_s(relabel, POLICY) == POLICY.mig_reconfigure_s == 300.0
    assert reconfigure_s(dynamic, POLICY) == DYNAMIC_READY_S == 0.0
    assert reconfigure_s(node("f", A100, 1, reconfiguration=FIXED), POLICY) == 0.0

    (change,) = plan_reconfiguration(_state(dynamic), [_mig("j", "7g.80gb")], POLICY, NOW)
    assert (change.node, change.new, change.ready_at) == ("d", (("7g.80gb", 0),), NOW)
    (change,) = plan_reconfiguration(_state(relabel), [_mig("j", "7g.80gb")], POLICY, NOW)
    assert change.ready_at == NOW + 300.0


def test_a_change_ready_at_once_is_preferred_to_a_relabel_that_serves_as_much() -> None:
    # "a" sorts first by name, but relabelling it drains and pauses it for minutes: the dynamic "b" serves the same.
    nodes = (node("a", H100, 1, mig="all-1g.10gb"), node("b", H100, 1, mig="all-1g.10gb", reconfiguration=DYNAMIC))
    (change,) = plan_reconfiguration(_state(*nodes), [_mig("j", "7g.80gb")], POLICY, NOW)
    assert change.node == "b"
    # ``modes`` limits a call to the nodes that change so.
    (change,) = plan_reconfiguration(
        _state(*nodes), [_mig("j", "7g.80gb")], POLICY, NOW, modes={ReconfigurationMode.RELABEL}
    )
    assert change.node == "a"


def test_the_budget_counts_only_nodes_that_relabel() -> None:
    relabel = [node(f"r{i}", A100, 1) for i in range(8)]
    dynamic = [node(f"d{i}", H100, 1, reconfiguration=DYNAMIC) for i in range(40)]
    assert nodes_per_cycle(state_of([*relabel, *dynamic]), NOW) == 1
    assert nodes_per_cycle(state_of([*relabel, *relabel[:1], node("r9", A100, 1)]), NOW) == 2


def test_dynamic_nodes_change_outside_the_budget_in_the_same_cycle() -> None:
    # 16 one-GPU nodes cut in 1g.10gb: 8 relabel (budget 1), 8 dynamic. Five aged 7g.80gb jobs: the 8 dynamic nodes
    # need no budget, so five change at once, and the relabelled nodes not at all (the dynamic ones serve it all).
    relabel = [node(f"r{i}", H100, 1, mig="all-1g.10gb") for i in range(8)]
    dynamic = [node(f"d{i}", H100, 1, mig="all-1g.10gb", reconfiguration=DYNAMIC) for i in range(8)]
    pending = [job(f"j{i}", mig="7g.80gb", kind=JobKind.INFERENCE, submitted_at=OLD) for i in range(5)]
    for speedups in (True, False):
        plan = plan_cycle(
            snapshot([*relabel, *dynamic], pending, [team("t", guaranteed=16)]), POLICY, NOW, speedups=speedups
        )
        assert [c.node for c in plan.reconfigurations] == [f"d{i}" for i in range(5)]
        assert {c.ready_at for c in plan.reconfigurations} == {NOW}
        reasons = {w.job: w.reason for w in plan.waiting}
        assert all(f"node d{i} GPU 0" in reasons[f"j{i}"] for i in range(5))


def test_once_the_dynamic_nodes_are_spent_the_budget_still_allows_its_relabels() -> None:
    # 2 dynamic nodes and 16 relabelled ones (budget 2): four aged jobs get both dynamic nodes and two relabels.
    relabel = [node(f"r{i:02d}", H100, 1, mig="all-1g.10gb") for i in range(16)]
    dynamic = [node(f"d{i}", H100, 1, mig="all-1g.10gb", reconfiguration=DYNAMIC) for i in range(2)]
    pending = [job(f"j{i}", mig="7g.80gb", kind=JobKind.INFERENCE, submitted_at=OLD) for i in range(6)]
    for speedups in (True, False):
        plan = plan_cycle(
            snapshot([*relabel, *dynamic], pending, [team("t", guaranteed=32)]), POLICY, NOW, speedups=speedups
        )
        changes = {c.node: c.ready_at for c in plan.reconfigurations}
        assert changes == {"d0": NOW, "d1": NOW, "r00": NOW + 300.0, "r01": NOW + 300.0}


def test_a_dynamic_node_changed_in_a_cycle_is_not_changed_again_in_it() -> None:
    # One 2-GPU dynamic node, both GPUs idle in 3g.40gb. Two aged 7g.80gb jobs and an aged 1g.10gb one: one call
    # turns both GPUs into 7g.80gb, promised to the two. The 1g.10gb demand is left; the node, ready at once, is not
    # closed by its readiness, so it must be held: a second call re-cutting a GPU would break a promise.
    nodes = [node("d", H100, 2, mig="all-3g.40gb", reconfiguration=DYNAMIC)]
    pending = [job(f"j{i}", mig="7g.80gb", kind=JobKind.INFERENCE, submitted_at=OLD) for i in range(2)]
    pending.append(job("small", mig="1g.10gb", kind=JobKind.INFERENCE, submitted_at=OLD))
    for speedups in (True, False):
        plan = plan_cycle(snapshot(nodes, pending, [team("t", guaranteed=16)]), POLICY, NOW, speedups=speedups)
        assert [(c.node, c.gpu, c.new) for c in plan.reconfigurations] == [
            ("d", 0, (("7g.80gb", 0),)),
            ("d", 1, (("7g.80gb", 0),)),
        ]
        assert plan.binds == ()


@pytest.mark.parametrize("mode", [ReconfigurationMode.RELABEL, DYNAMIC, FIXED])
def test_only_a_node_that_may_change_mig_mode_turns_a_mig_gpu_whole(mode: ReconfigurationMode) -> None:
    state = _state(node("a", A100, 1, mig="all-3g.40gb", reconfiguration=mode))
    changes = plan_reconfiguration(state, [], POLICY, NOW, pending_whole=[_whole("w")])
    assert [c.new for c in changes] == ([] if mode is FIXED else [()])


@pytest.mark.parametrize("mode", [ReconfigurationMode.RELABEL, DYNAMIC, FIXED])
def test_only_a_node_that_may_change_mig_mode_turns_mig_on(mode: ReconfigurationMode) -> None:
    state = _state(node("a", A100, 1, reconfiguration=mode))  # MIG off
    changes = plan_reconfiguration(state, [_mig("j", "1g.10gb")], POLICY, NOW)
    assert [c.node for c in changes] == ([] if mode is FIXED else ["a"])


def test_a_fixed_mode_node_re_cuts_its_mig_gpus_at_once() -> None:
    # GPU 0 MIG-enabled (3g.40gb ×2), GPU 1 MIG off: an aged 1g.10gb demand re-cuts GPU 0 only, ready at once.
    state = _state(node("a", A100, 2, mig=["all-3g.40gb", ""], reconfiguration=FIXED))
    (change,) = plan_reconfiguration(state, [_mig(f"j{i}", "1g.10gb") for i in range(3)], POLICY, NOW)
    assert (change.gpu, change.ready_at) == (0, NOW)
    assert sum(1 for profile, _start in change.new if profile == "1g.10gb") >= 3
