"""The simulated fleet's apply batch: the same results, refusals and effects as the operations one by one, with a
cost in proportion to the batch, not to the fleet."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from jobs.models import JobEvent
from scheduler.gateways.protocol import BatchingGateway, BindRequest, Device, ReplicaPlacement
from scheduler.loop import apply as apply_module
from scheduler.loop.apply import ApplyResult, BindOp, EvictOp, ReconfigureOp, Retry, apply_ops
from scheduler.models import Gpu, SimulatedNodeState, SimulatedPod, SimulatedProgress
from scheduler.services.fleet import node_register
from tests.factories import JobFactory
from tests.scheduler.loop_helpers import Clock, fleet, fleet_seed, team_seed

pytestmark = pytest.mark.django_db
NO_WAIT = Retry(attempts=1, backoff_s=0.0)


def _request(job: Any, placements: list[ReplicaPlacement], **extra: Any) -> BindRequest:
    return BindRequest(
        job=str(job.pk),
        namespace=job.team.namespace,
        name=job.name,
        placements=tuple(placements),
        duration_s=100_000.0,
        **extra,
    )


def _whole(replica: int, node: str, *gpus: int) -> ReplicaPlacement:
    return ReplicaPlacement(replica=replica, node=node, devices=tuple(Device(gpu=g) for g in gpus))


def _state() -> dict[str, Any]:
    """Everything the fleet keeps, in a comparable form."""
    return {
        "pods": sorted(
            SimulatedPod.objects.values_list(
                "job_id",
                "replica",
                "generation",
                "node__name",
                "devices",
                "namespace",
                "bound_at",
                "work_start_s",
                "stop_requested_at",
                "exits_at",
            ),
            key=repr,
        ),
        "progress": sorted(SimulatedProgress.objects.values_list("job_id", "saved_work_s", "checkpointed_at")),
        "nodes": sorted(
            SimulatedNodeState.objects.values_list(
                "node__name", "notice_at", "gone_at", "back_at", "mig_desired", "mig_since", "mig_ready_at"
            ),
            key=repr,
        ),
        "gpus": sorted(Gpu.objects.values_list("node__name", "index", "mig_layout"), key=repr),
        "events": sorted(JobEvent.objects.values_list("job_id", "type", "at", "details"), key=repr),
    }


def _applied(gateway: Any, ops: list[Any], *, batched: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """Apply ``ops`` (batched, consecutive binds in one call, or one by one), read the result and the fleet, and undo
    it all."""
    with monkeypatch.context() as patch:
        if not batched:
            patch.setattr(apply_module, "_batch", lambda gateway: transaction.atomic(savepoint=False))
            patch.setattr(apply_module, "_binds_together", lambda gateway: None)
        with transaction.atomic():
            result: ApplyResult = apply_ops(gateway, ops, grace_s=30.0, retry=NO_WAIT)
            state = _state()
            transaction.set_rollback(True)
    refused = [(op.request.job, message) for op, message in result.refused]
    return result.applied, result.failed, refused, state


def test_a_batch_has_the_effects_and_refusals_of_its_operations_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet_seed()
    team = team_seed()
    clock = Clock()
    gateway = fleet(clock, mig_reconfigure_s=0.0, checkpoint_cost_s=30.0)
    assert isinstance(gateway, BatchingGateway)
    held = JobFactory(team=team, gpus=2)
    plain = JobFactory(team=team, gpus=1)  # no checkpoints: under a notice it exits at once
    saving = JobFactory(team=team, gpus=1)
    on_mig = JobFactory(team=team, gpus=1)
    gateway.job_bind(request=_request(held, [_whole(0, "a100-res-1", 0, 1)]))
    gateway.job_bind(request=_request(plain, [_whole(0, "pcie-spot-1", 0)]))
    gateway.job_bind(
        request=_request(
            saving, [_whole(0, "pcie-spot-1", 1)], checkpoint_interval_s=600.0, checkpoint_dir="/checkpoints/job-x"
        )
    )
    gateway.job_bind(request=_request(on_mig, [_whole(0, "mig-od-1", 1)]))
    clock.advance(20)
    gateway.notice_give(node="pcie-spot-1")
    clock.advance(0.25)
    first, second, mig, closed, gang = (JobFactory(team=team, gpus=2) for _ in range(5))
    instance = ReplicaPlacement(0, "mig-od-1", (Device(gpu=1, mig_profile="3g.40gb", mig_start=4),))
    ops = [
        BindOp(_request(first, [_whole(0, "a100-res-1", 0, 1)]), team=team.slug),  # on what the eviction frees
        BindOp(_request(second, [_whole(0, "a100-res-1", 1, 2)]), team=team.slug),  # refused: GPU 1 is taken
        BindOp(_request(mig, [instance]), team=team.slug),  # on the layout a zero-delay change made
        BindOp(_request(closed, [_whole(0, "pcie-spot-1", 2)]), team=team.slug),  # refused: under a notice
        BindOp(_request(gang, [_whole(0, "a100-res-1", 4), _whole(1, "nowhere", 0)]), team=team.slug),  # refused
        BindOp(_request(saving, [_whole(0, "a100-res-1", 5)]), team=team.slug),  # clears its own stopping pod
        ReconfigureOp(node="mig-od-1", layouts=((), (("3g.40gb", 0), ("3g.40gb", 4)))),  # drains on_mig
        ReconfigureOp(node="pcie-spot-1", layouts=((), (), (), ())),  # no change: a no-op
        EvictOp(job=str(held.pk), namespace=team.namespace, reason="priority"),
        EvictOp(job=str(plain.pk), namespace=team.namespace, reason="spot-reclaim"),
        EvictOp(job=str(saving.pk), namespace=team.namespace, reason="spot-reclaim"),
    ]

    one_by_one = _applied(gateway, ops, batched=False, monkeypatch=monkeypatch)
    batched = _applied(gateway, ops, batched=True, monkeypatch=monkeypatch)

    assert batched == one_by_one
    applied, failed, refused, state = batched
    assert [job for job, _ in refused] == [str(second.pk), str(closed.pk), str(gang.pk)]
    assert not failed and len(applied) == 8
    # plain exited at once, before the binds (one by one, the first bind's advance removed it); saving restarted.
    assert sorted(pod[0] for pod in state["pods"]) == sorted([first.pk, mig.pk, saving.pk])


def _binds(team: Any, count: int) -> list[BindOp]:
    jobs = [JobFactory(team=team, gpus=1) for _ in range(count)]
    return [BindOp(_request(job, [_whole(0, "a100-res-1", gpu)]), team=team.slug) for gpu, job in enumerate(jobs)]


def _batch_queries(gateway: Any, ops: list[BindOp]) -> int:
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        result = apply_ops(gateway, ops, grace_s=30.0, retry=NO_WAIT)
        transaction.set_rollback(True)
    assert len(result.applied) == len(ops)
    return len(queries)


def test_a_batch_costs_in_proportion_to_its_operations_not_to_the_fleet() -> None:
    fleet_seed()
    team = team_seed()
    clock = Clock()
    gateway = fleet(clock)
    gateway.observe()  # the fleet's node states exist, as after any cycle's observation
    small = _batch_queries(gateway, _binds(team, 4))
    more = _batch_queries(gateway, _binds(team, 8))
    for n in range(40):
        node_register(
            name=f"extra-{n}",
            gpu_model="A100-SXM4-80GB",
            gpu_count=8,
            interconnect="nvswitch",
            leaf_switch="leaf-9",
            spine="spine-1",
            tier="reserved",
            price_per_gpu_hour="2.2295",
        )
    gateway.observe()
    assert _batch_queries(gateway, _binds(team, 4)) == small  # 43 nodes cost what 3 did
    per_bind = (more - small) / 4
    assert per_bind <= 8  # the pods of the job and the node, its saved progress, the new pod: no walk, no node read


def test_a_refused_operation_inside_a_batch_is_undone_alone() -> None:
    fleet_seed()
    team = team_seed()
    gateway = fleet(Clock())
    kept, refused = JobFactory(team=team, gpus=1), JobFactory(team=team, gpus=2)
    ops = [
        BindOp(_request(kept, [_whole(0, "a100-res-1", 0)]), team=team.slug),
        BindOp(_request(refused, [_whole(0, "a100-res-1", 1), _whole(1, "a100-res-1", 0)]), team=team.slug),
    ]
    result = apply_ops(gateway, ops, grace_s=30.0, retry=NO_WAIT)
    assert result.applied == [f"bind {kept.pk}"] and [op.request.job for op, _ in result.refused] == [str(refused.pk)]
    assert list(SimulatedPod.objects.values_list("job_id", flat=True)) == [kept.pk]  # the gang left nothing


def test_an_error_that_is_no_gateway_error_undoes_the_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    fleet_seed()
    team = team_seed()
    gateway = fleet(Clock())
    first, second, third = JobFactory(team=team, gpus=1), JobFactory(team=team, gpus=1), JobFactory(team=team, gpus=1)
    real = gateway._start_pods

    def start_pods(request: BindRequest, *args: Any, **kwargs: Any) -> Any:
        if request.job == str(third.pk):
            raise RuntimeError("a bug")
        return real(request, *args, **kwargs)

    monkeypatch.setattr(gateway, "_start_pods", start_pods)
    ops: list[Any] = [
        EvictOp(job=str(first.pk), namespace=team.namespace, reason="priority"),  # nothing to evict: applied
        *(
            BindOp(_request(job, [_whole(0, "a100-res-1", gpu)]), team=team.slug)
            for gpu, job in enumerate((second, third))
        ),
    ]
    gateway.job_bind(request=_request(first, [_whole(0, "a100-res-1", 7)]))
    with pytest.raises(RuntimeError, match="a bug"):
        apply_ops(gateway, ops, grace_s=30.0, retry=NO_WAIT)
    # The eviction and the first bind went with it: the next cycle repairs them.
    assert list(SimulatedPod.objects.values_list("job_id", flat=True)) == [first.pk]


def test_a_batch_inside_a_batch_is_the_one_batch() -> None:
    fleet_seed()
    gateway = fleet(Clock())
    with gateway.batch():
        outer = gateway._batch
        with gateway.batch():
            assert gateway._batch is outer
        assert gateway._batch is outer
    assert gateway._batch is None


def test_in_any_order_a_batch_removes_what_exits_at_its_instant_as_the_next_operation_would() -> None:
    """apply_ops evicts before it binds; called directly, a batch may stop pods after its walk: a process that exits
    at once is gone at the next operation that lets the cloud act, as one by one."""
    fleet_seed()
    team = team_seed()
    clock = Clock()
    gateway = fleet(clock)
    plain, early, later = (JobFactory(team=team, gpus=1) for _ in range(3))
    gateway.job_bind(request=_request(plain, [_whole(0, "pcie-spot-1", 0)]))
    gateway.notice_give(node="pcie-spot-1")

    def steps() -> dict[str, Any]:
        with transaction.atomic():
            gateway.job_bind(request=_request(early, [_whole(0, "a100-res-1", 1)]))  # a batch walks the fleet here
            gateway.job_evict(job=str(plain.pk), namespace=team.namespace, grace_s=30.0, reason="spot-reclaim")
            gateway.job_bind(request=_request(later, [_whole(0, "a100-res-1", 0)]))
            state = _state()
            transaction.set_rollback(True)
        return state

    one_by_one = steps()
    with gateway.batch():
        batched = steps()
    assert batched == one_by_one
    assert sorted(pod[0] for pod in batched["pods"]) == sorted([early.pk, later.pk])
