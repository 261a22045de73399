"""The public API of the core, pinned (the httpx idea): what the rest of Microcosm may import from
``scheduler.core``. Changing it is a deliberate act — update this list in the same change."""

from __future__ import annotations

import dataclasses
import inspect
from enum import Enum

import scheduler.core as core

PUBLIC = [
    "ANY",
    "Bind",
    "CheckpointInterval",
    "DemandKind",
    "Evict",
    "Job",
    "ModelProfile",
    "Node",
    "NodeCensus",
    "NodeRequest",
    "Offer",
    "Offering",
    "Plan",
    "Policy",
    "Preemption",
    "Preview",
    "PreviewOutcome",
    "Provision",
    "Provisioning",
    "QueuePlace",
    "Reconfigure",
    "Reject",
    "Release",
    "Request",
    "Running",
    "Slot",
    "Snapshot",
    "Team",
    "Waiting",
    "Withdraw",
    "arrival_model",
    "borrowed_in_fill",
    "bounds",
    "burst_limits",
    "carried",
    "checkpoint_interval",
    "checkpointing",
    "default_arrival_s",
    "estimate",
    "fill_order",
    "guarantee_limits",
    "memory_model_for",
    "memory_need_mib",
    "offers",
    "plan_cycle",
    "preview",
    "queue_order",
    "rejection_reason",
    "replica_need",
    "reposition",
    "resolve",
    "text_problem",
    "unplaceable_reason",
]


def test_all_is_pinned() -> None:
    assert sorted(core.__all__) == PUBLIC


def test_every_public_name_is_importable_and_frozen() -> None:
    for name in PUBLIC:
        value = getattr(core, name)
        if inspect.isclass(value) and not issubclass(value, Enum):  # an enum's members are fixed already
            assert dataclasses.is_dataclass(value), name
            assert value.__dataclass_params__.frozen, name  # type: ignore[attr-defined]


def test_rejection_reason_signature() -> None:
    signature = "(job: 'Job', nodes: 'Sequence[Node] | NodeCensus', policy: 'Policy') -> 'str | None'"
    assert str(inspect.signature(core.rejection_reason)) == signature


def test_plan_cycle_signature() -> None:
    signature = "(snapshot: 'Snapshot', policy: 'Policy', now: 'float', *, speedups: 'bool' = True) -> 'Plan'"
    assert str(inspect.signature(core.plan_cycle)) == signature


def test_checkpoint_interval_signature() -> None:
    signature = (
        "(*, cost_s: 'float', interruptions_per_node_day: 'float', nodes: 'int', max_interval_s: 'float', "
        "evictions_per_job_day: 'float' = 0.0) -> 'CheckpointInterval'"
    )
    assert str(inspect.signature(core.checkpoint_interval)) == signature
