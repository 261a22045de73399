"""Where a job may go: the (group, demand) options placement searches, with their preference ranks.

An option is one group of ready nodes (GPU model, capacity tier, interconnect) that the job's ``gpu_model``
constraint and tier routing allow, with the per-replica demand :func:`scheduler.core.sizing.rightsize.resolve`
gives on that model. Options are cached per job *shape* (everything placement depends on), so 10,000
pending jobs of a few shapes cost a few resolutions.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import cast

from scheduler.core.gpus.catalog import GPU_MODEL_BY_NAME
from scheduler.core.model.demand import Demand, DemandKind
from scheduler.core.model.policy import Policy
from scheduler.core.model.shape import sizing_shape
from scheduler.core.model.snapshot import Job
from scheduler.core.placement.index import CapacityIndex, Group
from scheduler.core.rules.tiers import tier_rank
from scheduler.core.sizing.rightsize import resolve

# Smaller holdings first when a request could be served several ways (a memory request: a MIG slice on an
# A100, whole GPUs on a GPU without MIG): the right-sized holding wastes least.
KIND_RANK: dict[str, int] = {DemandKind.MIG: 0, DemandKind.SHARE: 1, DemandKind.WHOLE: 2}


@dataclass(frozen=True, slots=True)
class Option:
    tier_rank: int  # 0 = the job's most preferred capacity tier
    model_rank: int  # smaller GPUs first, then by name: ties go to the cheaper part
    group: Group
    demand: Demand

    def __init__(self, tier_rank: int, model_rank: int, group: Group, demand: Demand) -> None:
        object.__setattr__(self, "tier_rank", tier_rank)
        object.__setattr__(self, "model_rank", model_rank)
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "demand", demand)

    @property
    def model(self) -> str:
        return self.group[0]


def model_ranks(index: CapacityIndex) -> dict[str, int]:
    cached = stored_answer(index, "model_ranks", None)
    if cached is None:
        models = sorted({node.gpu_model for node in index.state.nodes.values()}, key=model_order)
        cached = {model: rank for rank, model in enumerate(models)}
        store_answer(index, "model_ranks", None, cached)
    return cast(dict[str, int], cached)


def model_order(model: str) -> tuple[int, str]:
    """The sort key of GPU models in placement's preference: smaller memory first, then by name."""
    spec = GPU_MODEL_BY_NAME.get(model)
    return (spec.memory_mib if spec else 0, model)


def options_for(index: CapacityIndex, job: Job, policy: Policy) -> tuple[Option, ...]:
    """The job's options on the index's ready nodes, sorted by (tier rank, kind, model rank, group)."""
    key = ("options", sizing_shape(job))
    cached = stored_answer(index, key, policy)
    if cached is not None:
        return cast(tuple[Option, ...], cached)
    ranks = tier_rank(job)
    models = model_ranks(index)
    demands: dict[str, Demand | None] = {}
    found: list[Option] = []
    for group in index.groups:
        model, tier, _ = group
        if tier not in ranks:
            continue
        if model not in demands:
            demands[model] = resolve(job, model, policy)
        demand = demands[model]
        if demand is not None:
            found.append(Option(ranks[tier], models[model], group, demand))
    found.sort(key=lambda o: (o.tier_rank, KIND_RANK[o.demand.kind], o.model_rank, o.group))
    options = tuple(found)
    store_answer(index, key, policy, options)
    return options


def stored_answer(index: CapacityIndex, key: Hashable, policy: Policy | None) -> object | None:
    """What :func:`store_answer` stored under ``key`` for ``policy`` in the index's answers, or None. The
    policy is compared by identity first: a frozen dataclass's equality runs Python code, and a cycle has one
    policy."""
    cached = index.answers.get(key)
    if cached is None:
        return None
    held, value = cached
    return value if held is policy or held == policy else None


def store_answer(index: CapacityIndex, key: Hashable, policy: Policy | None, value: object) -> None:
    index.answers[key] = (policy, value)
