"""The decision engine: pure Python, no Django, Celery, Redis or kubernetes (see DESIGN.md §2).

The public API — what the rest of Microcosm may import from ``scheduler.core`` — is pinned by
``tests/scheduler/core/test_public_api.py``: the cycle's entry point, the question a submit asks it before writing
(:func:`rejection_reason`), and the frozen values they take and give; and the rules the apps show or re-apply
outside a cycle: the table of job-request ranges (``bounds``, :func:`text_problem`), right-sizing, the order in
which the engine tries a fleet's GPU models and tiers (:func:`offers`), what it would do with a job submitted now
(:func:`preview`), from the state a cycle leaves (:func:`carried`), and the memory estimate the submit form shows,
the quota limits and priority order the team pages and billing's guarantee check read, and the size of a GPU in
capacity units; the checkpoint interval the submit and job pages propose (:func:`checkpoint_interval`, with its
inputs in ``checkpointing``); and the queue's order between cycles (:func:`queue_order`) with a waiting reason told
again for a new position (:func:`reposition`), which a lead's reorder writes at once; and a job's true need
(:func:`replica_need`), which the live utilization gauge shares with the benchmarks; and what the engine is told of
autoscaled pools and decides about them (:class:`Provisioning`, :class:`Offering`, :class:`NodeRequest`;
:class:`Provision`, :class:`Withdraw`, :class:`Release`), with the provisioning model (:func:`arrival_model`,
:func:`default_arrival_s`: how long an on-demand node takes to arrive, how often a request stocks out), which the
loop's offerings and billing's procurement advisor read.
``scheduler.core.model.vocabulary`` and ``scheduler.core.gpus.catalog`` are public modules of their own.
"""

from scheduler.core.gpus.arrival import arrival_model, default_arrival_s
from scheduler.core.model.demand import DemandKind
from scheduler.core.model.explain import reposition
from scheduler.core.model.plan import Bind, Evict, Plan, Reconfigure, Reject, Waiting
from scheduler.core.model.policy import Policy
from scheduler.core.model.provisioning import NodeRequest, Offering, Provision, Provisioning, Release, Withdraw
from scheduler.core.model.snapshot import Job, ModelProfile, Node, Preemption, Request, Running, Slot, Snapshot, Team
from scheduler.core.placement.offers import Offer, offers
from scheduler.core.planning.carry import carried
from scheduler.core.planning.cycle import NodeCensus, plan_cycle, rejection_reason
from scheduler.core.planning.preview import Preview, PreviewOutcome, preview
from scheduler.core.planning.queue import QueuePlace, queue_order
from scheduler.core.rules import checkpointing
from scheduler.core.rules.checkpointing import CheckpointInterval, checkpoint_interval
from scheduler.core.rules.limits import ANY, borrowed_in_fill, burst_limits, fill_order, guarantee_limits
from scheduler.core.sizing import bounds
from scheduler.core.sizing.bounds import text_problem
from scheduler.core.sizing.memory import estimate, memory_model_for
from scheduler.core.sizing.need import replica_need
from scheduler.core.sizing.rightsize import memory_need_mib, resolve, unplaceable_reason

__all__ = [
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
