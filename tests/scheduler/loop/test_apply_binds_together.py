"""``apply_ops`` hands each run of consecutive binds to a gateway that binds many at once
(:class:`~scheduler.gateways.protocol.BindingManyGateway`), in the order one by one would apply them, and gives
each bind the outcome it would have alone: applied, refused (requeued by the caller) or failed (left to the next
cycle). No database: the gateway only records what it is asked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.errors import GatewayRetryable
from scheduler.gateways.protocol import BindingManyGateway, BindRequest
from scheduler.loop.apply import BindOp, EvictOp, MoveOp, Retry, apply_ops


def _request(job: str) -> BindRequest:
    return BindRequest(job=job, namespace="team-nlp", name=f"job-{job}", placements=())


def _bind(job: str) -> BindOp:
    return BindOp(request=_request(job), team="nlp")


class Many:
    """Records its calls; refuses the jobs in ``refuse``; fails ``failures`` calls of ``jobs_bind`` transiently."""

    name = "many"

    def __init__(self, refuse: Mapping[str, str] | None = None, failures: int = 0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.refuse = dict(refuse or {})
        self.failures = failures

    def namespace_ensure(self, **kwargs: Any) -> None:
        self.calls.append(("namespace_ensure", kwargs["namespace"]))

    def job_evict(self, **kwargs: Any) -> None:
        self.calls.append(("job_evict", kwargs["job"]))

    def job_move(self, *, request: BindRequest, generation: int) -> None:
        self.calls.append(("job_move", request.job))

    def job_bind(self, *, request: BindRequest) -> None:
        raise AssertionError("a gateway that binds many is not asked one by one")

    def jobs_bind(self, *, requests: Sequence[BindRequest]) -> dict[str, str]:
        self.calls.append(("jobs_bind", [r.job for r in requests]))
        if self.failures:
            self.failures -= 1
            raise GatewayRetryable("HTTP 503 from the API server")
        return {r.job: self.refuse[r.job] for r in requests if r.job in self.refuse}


def test_runs_of_consecutive_binds_go_in_one_call_each_in_order() -> None:
    gateway = Many(refuse={"2": "node n-1 is cordoned"})
    assert isinstance(gateway, BindingManyGateway)
    ops = [
        _bind("1"),
        _bind("2"),
        MoveOp(request=_request("3"), team="nlp", generation=1),
        _bind("4"),
        EvictOp(job="9", namespace="team-nlp", reason="priority"),  # sorted first, as one by one
    ]

    result = apply_ops(gateway, ops, grace_s=30.0, retry=Retry(attempts=1))  # type: ignore[arg-type]

    assert [call for call in gateway.calls if call[0] != "namespace_ensure"] == [
        ("job_evict", "9"),
        ("jobs_bind", ["1", "2"]),
        ("job_move", "3"),
        ("jobs_bind", ["4"]),
    ]
    assert result.applied == ["evict 9 (priority)", "bind 1", "move 3 (generation 1)", "bind 4"]
    assert [(op.request.job, message) for op, message in result.refused] == [("2", "node n-1 is cordoned")]
    assert result.failed == []


def test_a_transient_failure_of_the_call_is_retried_and_a_lasting_one_leaves_every_bind_to_the_next_cycle() -> None:
    sleeps: list[float] = []
    flaky = Many(failures=1)
    result = apply_ops(flaky, [_bind("1"), _bind("2")], grace_s=30.0, retry=Retry(backoff_s=0.5, sleep=sleeps.append))  # type: ignore[arg-type]
    assert result.applied == ["bind 1", "bind 2"] and sleeps == [0.5]

    down = Many(failures=5)
    result = apply_ops(down, [_bind("1"), _bind("2")], grace_s=30.0, retry=Retry(attempts=2, sleep=lambda _s: None))  # type: ignore[arg-type]
    assert result.applied == [] and result.refused == []
    assert result.failed == ["bind 1: HTTP 503 from the API server", "bind 2: HTTP 503 from the API server"]


def test_each_namespace_is_ensured_once_before_the_binds() -> None:
    gateway = Many()
    apply_ops(gateway, [_bind("1"), _bind("2")], grace_s=30.0, retry=Retry(attempts=1))  # type: ignore[arg-type]
    assert gateway.calls == [("namespace_ensure", "team-nlp"), ("jobs_bind", ["1", "2"])]
