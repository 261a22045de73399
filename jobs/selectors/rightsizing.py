""" "What will this get": the one answer the submit page's suggestion and the ``rightsize`` API give, from the
engine itself.

For a job spec being typed (or posted), on the cluster as it is now:

- **now** — what the engine does if the job is submitted now (:mod:`scheduler.bridge.preview`): the MIG profile or
  GPUs each replica gets, on which GPU model, tier and nodes — a larger free slice than the right size when the
  engine would take one — and what that costs per hour at the price catalog's prices; or that it starts after a
  MIG reconfiguration; or why it waits (the engine's reason and start estimate); or why it could never run, which
  is also why a submit is refused (:func:`jobs.services.submit.job_submit` asks the engine the same question);
- **options** — every GPU model and tier of the fleet the job could use, in the order the engine tries them
  (:func:`scheduler.core.placement.offers`), each with its per-replica holding and catalog price;
- the memory estimate behind a ``memory_gib`` or ``model`` request; for a model, naming the memory model it used
  (training: weights + gradients + optimizer states + activations; inference: weights + KV cache), which is the
  job kind's unless the spec's ``model.mode`` says otherwise for batch work (:func:`scheduler.core.memory_model_for`).

The defaults are the job spec's (``spec/scenario.md``: ``kind`` training, ``priority`` normal, ``tier`` any), for the
form and the API alike. Without a team the answer has no "now": quotas decide whether a job waits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from billing.prices import PriceBook
from billing.services import price_book_load
from scheduler.bridge.policy import policy_current
from scheduler.bridge.preview import fleet_answer
from scheduler.core import DemandKind, Offer, Preview, PreviewOutcome, Slot, estimate, memory_need_mib
from scheduler.core import Node as CoreNode
from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME, compute_fraction
from scheduler.core.gpus.units import FULL_GPU_MILLI
from scheduler.core.model.vocabulary import NodeState
from scheduler.models import Node
from scheduler.specs.fields import Errors
from scheduler.specs.job import parse_job

# The keys of a right-sizing question: what one replica asks for, where it may run, and what decides its turn.
RIGHTSIZE_KEYS = (
    "kind",
    "gpus",
    "mig_profile",
    "memory_gib",
    "model",
    "replicas",
    "gpu_model",
    "priority",
    "tier",
    "preemptible",
)
_CENTS = Decimal("0.01")
_FOUR_PLACES = Decimal("0.0001")


@dataclass(frozen=True)
class Option:
    """What one replica holds on one GPU model and tier, and the catalog price of a GPU there."""

    gpu_model: str
    gpu_class: str
    tier: str
    mig_profile: str | None  # one MIG instance per replica, or
    gpus: int  # whole GPUs per replica (0 with a MIG profile)
    gpu_equivalents: float  # per replica: 1 per GPU, compute slices / 7 per MIG instance
    price_per_gpu_hour: Decimal | None = None  # None: neither the catalog nor the nodes name a price

    @property
    def label(self) -> str:
        if self.mig_profile:
            return f"MIG {self.mig_profile}"
        return f"{self.gpus} whole GPU{'s' if self.gpus != 1 else ''}"

    def cost_per_hour(self, replicas: int) -> Decimal | None:
        """What ``replicas`` replicas held like this cost per hour."""
        if self.price_per_gpu_hour is None:
            return None
        return (self.price_per_gpu_hour * Decimal(repr(self.gpu_equivalents)) * replicas).quantize(_CENTS)


@dataclass(frozen=True)
class Now:
    """What the engine does with the job if it is submitted now."""

    outcome: str  # a scheduler.core.PreviewOutcome value
    option: Option | None = None  # what each replica gets, when it starts
    nodes: tuple[str, ...] = ()  # where, one name per replica
    cost_per_hour: Decimal | None = None  # the whole job, at catalog prices
    after_s: float = 0.0  # until it starts (a MIG reconfiguration), seconds
    evictions: int = 0  # running jobs stopped to make room for it
    reason: str = ""  # why it waits or never runs
    eta_s: float | None = None  # the engine's start estimate when it waits, seconds from now

    @property
    def starts(self) -> bool:
        return self.option is not None


@dataclass(frozen=True)
class Suggestion:
    errors: dict[str, list[str]] = field(default_factory=dict)  # spec key path → reasons
    options: list[Option] = field(default_factory=list)  # the engine's order of preference
    memory_gib: float | None = None  # per replica, margin included, for memory and model requests
    memory_breakdown: str = ""  # the memory model used (the kind's) and the estimate's parts, for model requests
    reason: str = ""  # why no GPU model of the fleet can serve the request
    replicas: int = 1
    now: Now | None = None  # None without a team, or when the request cannot be sized

    @property
    def best(self) -> Option | None:
        """What each replica gets: where the engine starts it now, else the engine's first choice; None when the
        job could never run (``reason``)."""
        if self.reason:
            return None
        if self.now is not None and self.now.option is not None:
            return self.now.option
        return self.options[0] if self.options else None

    @property
    def cost_per_hour(self) -> Decimal | None:
        if self.now is not None and self.now.option is not None:
            return self.now.cost_per_hour
        best = self.best
        return best.cost_per_hour(self.replicas) if best is not None else None


def errors_by_key(messages: list[str], source: str) -> dict[str, list[str]]:
    """``["spec: model.params_b: must be positive"]`` → ``{"model.params_b": ["must be positive"]}``; a
    message about the spec as a whole goes under ``non_field_errors``."""
    result: dict[str, list[str]] = {}
    for message in messages:
        text = message.removeprefix(f"{source}: ") if message.startswith(f"{source}: ") else message
        key, sep, reason = text.partition(": ")
        if not sep or " " in key:
            key, reason = "non_field_errors", text
        result.setdefault(key, []).append(reason)
    return result


def suggest(spec: Mapping[str, Any], *, team: str | None = None, now: float | None = None) -> Suggestion:
    """The answer for ``spec`` (job keys of spec/scenario.md) submitted to team ``team`` (a slug) at ``now``.

    Returns the problems with the spec when it does not parse (keyed like :func:`errors_by_key`), else the
    options and, with a team, what the engine does now (module doc).
    """
    source = "spec"
    errors = Errors(source)
    data = {k: v for k, v in spec.items() if k not in ("name", "image", "command", "env", "project")}
    data.setdefault("id", "suggestion")
    data["team"] = team or "suggestion"
    job = parse_job(errors, "", data, submitted_at=0.0)
    if errors.messages or job is None:
        return Suggestion(errors=errors_by_key(errors.messages, source))
    at = time.time() if now is None else now
    answer = fleet_answer(job, now=at)
    prices = _Prices(price_book_load(), answer.nodes, at)
    options = [prices.option(offer) for offer in answer.offers]
    policy = policy_current()
    need_mib = memory_need_mib(job.request, policy)
    breakdown = estimate(job.request.model, policy.memory_safety_margin).explain() if job.request.model else ""
    preview = answer.preview
    reason = preview.reason if preview.outcome == PreviewOutcome.NEVER else ""
    if not options and not reason:
        reason = "the cluster has no GPU nodes yet" if not answer.nodes else "no GPU node of the fleet fits it"
    return Suggestion(
        options=options,
        memory_gib=round(need_mib / 1024, 2) if need_mib is not None else None,
        memory_breakdown=breakdown,
        reason=reason,
        replicas=job.replicas,
        now=_now(preview, prices) if team is not None and answer.nodes else None,
    )


def _now(preview: Preview, prices: _Prices) -> Now:
    if not preview.slots:
        return Now(outcome=str(preview.outcome), reason=preview.reason, eta_s=preview.eta_s)
    replica = preview.slots[0]
    return Now(
        outcome=str(preview.outcome),
        option=prices.held(replica),
        nodes=tuple(slots[0].node for slots in preview.slots),
        cost_per_hour=prices.cost(preview.slots),
        after_s=preview.after_s,
        evictions=preview.evictions,
    )


class _Prices:
    """Catalog prices at an instant (billing's :class:`~billing.prices.PriceBook`, what the ledger will charge);
    a node's own price where the catalog has no row for its model and tier, as billing falls back to it."""

    def __init__(self, book: PriceBook, nodes: Mapping[str, CoreNode], at: float) -> None:
        self.book = book
        self.nodes = nodes
        self.at = datetime.fromtimestamp(at, tz=UTC)

    def per_gpu_hour(self, gpu_model: str, tier: str) -> Decimal | None:
        price = self.book.price_at(gpu_model=gpu_model, tier=tier, at=self.at)
        if price is not None:
            return price
        own = [n.price_per_gpu_hour for n in self.nodes.values() if n.gpu_model == gpu_model and n.tier == tier]
        return Decimal(repr(min(own))).quantize(_FOUR_PLACES) if own else None

    def option(self, offer: Offer) -> Option:
        demand = offer.demand
        return Option(
            gpu_model=offer.gpu_model,
            gpu_class=_gpu_class(offer.gpu_model),
            tier=str(offer.tier),
            mig_profile=demand.mig_profile if demand.kind == DemandKind.MIG else None,
            gpus=demand.gpus if demand.kind == DemandKind.WHOLE else 0,
            gpu_equivalents=offer.gpu_equivalents,
            price_per_gpu_hour=self.per_gpu_hour(offer.gpu_model, offer.tier),
        )

    def held(self, replica: tuple[Slot, ...]) -> Option:
        """What one replica holds where the engine put it."""
        node = self.nodes[replica[0].node]
        profile = replica[0].mig_profile
        return Option(
            gpu_model=node.gpu_model,
            gpu_class=_gpu_class(node.gpu_model),
            tier=str(node.tier),
            mig_profile=profile,
            gpus=0 if profile else len(replica),
            gpu_equivalents=sum(_slot_gpus(slot, node) for slot in replica),
            price_per_gpu_hour=self.per_gpu_hour(node.gpu_model, node.tier),
        )

    def cost(self, slots: tuple[tuple[Slot, ...], ...]) -> Decimal | None:
        total = Decimal(0)
        for replica in slots:
            for slot in replica:
                node = self.nodes[slot.node]
                price = self.per_gpu_hour(node.gpu_model, node.tier)
                if price is None:
                    return None
                total += price * Decimal(repr(_slot_gpus(slot, node)))
        return total.quantize(_CENTS)


def _slot_gpus(slot: Slot, node: CoreNode) -> float:
    if slot.mig_profile:
        return compute_fraction(node.gpu_model, slot.mig_profile)
    return slot.milli / FULL_GPU_MILLI


def _gpu_class(gpu_model: str) -> str:
    spec = GPU_MODEL_BY_NAME.get(gpu_model)
    return spec.gpu_class if spec else gpu_model


def fleet_gpu_models() -> list[str]:
    """The GPU models of the inventory's nodes that are not gone, by name: what a job may ask for."""
    rows = Node.objects.exclude(state=NodeState.GONE).values_list("gpu_model__name", flat=True)
    return sorted(set(rows))
