"""The loop tells a RecordingGateway the preemptor of each eviction and why jobs wait; other gateways see no change."""

from __future__ import annotations

from typing import Any

from scheduler.core.model.vocabulary import BlockerKind
from scheduler.errors import GatewayRetryable
from scheduler.gateways.protocol import JobWaiting, RecordingGateway
from scheduler.loop.apply import EvictOp, Retry, apply_ops, waiting_record

NO_WAIT = Retry(attempts=1, sleep=lambda _s: None)


class Plain:
    """A gateway without recording (the simulated fleet's shape): only job_evict."""

    name = "plain"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def job_evict(self, **kwargs: Any) -> None:
        self.calls.append(("job_evict", kwargs))


class Recording(Plain):
    def job_preempt(self, **kwargs: Any) -> None:
        self.calls.append(("job_preempt", kwargs))

    def jobs_waiting(self, *, waiting: Any) -> None:
        self.calls.append(("jobs_waiting", {"waiting": list(waiting)}))


class Failing(Recording):
    def jobs_waiting(self, *, waiting: Any) -> None:
        raise GatewayRetryable("the API server is away")


def test_a_recording_gateway_is_told_the_preemptor() -> None:
    gateway = Recording()
    assert isinstance(gateway, RecordingGateway) and not isinstance(Plain(), RecordingGateway)
    ops = [
        EvictOp(job="1", namespace="ns", reason="priority", by="7"),
        EvictOp(job="2", namespace="ns", reason="reclaim"),
    ]

    result = apply_ops(gateway, ops, grace_s=30, retry=NO_WAIT)  # type: ignore[arg-type]

    assert result.applied == ["evict 1 (priority)", "evict 2 (reclaim)"]
    assert gateway.calls == [
        ("job_preempt", {"job": "1", "namespace": "ns", "grace_s": 30, "reason": "priority", "by": "7"}),
        ("job_evict", {"job": "2", "namespace": "ns", "grace_s": 30, "reason": "reclaim"}),
    ]


def test_a_plain_gateway_evicts_as_before() -> None:
    gateway = Plain()

    apply_ops(gateway, [EvictOp(job="1", namespace="ns", reason="priority", by="7")], grace_s=30, retry=NO_WAIT)  # type: ignore[arg-type]
    waiting_record(gateway, [JobWaiting(job="3", namespace="ns", reason="waiting")])  # type: ignore[arg-type]

    assert gateway.calls == [("job_evict", {"job": "1", "namespace": "ns", "grace_s": 30, "reason": "priority"})]


def test_why_jobs_wait_is_passed_on_and_a_failure_only_logged() -> None:
    waiting = [JobWaiting(job="3", namespace="ns", reason="waiting for 8 GPUs", kind=BlockerKind.CAPACITY)]
    gateway = Recording()

    waiting_record(gateway, waiting)  # type: ignore[arg-type]
    waiting_record(Failing(), waiting)  # type: ignore[arg-type]

    assert gateway.calls == [("jobs_waiting", {"waiting": waiting})]
