"""B2's figures over seeds: each policy's per-seed figures flattened, their median, spread and worst seed, and
the claims of B2 judged as each target states — on the median, on the worst seed, or on every seed (which is the
worst seed too). The targets are stated in ``docs/benchmarks/mixed.md``.

The worst seed of a figure follows its direction (:func:`higher_is_better`): the lowest utilization, throughput or
count of completed jobs, the highest wait, idle share, eviction count or error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from scheduler.core.model.vocabulary import Priority
from scheduler.sim.bench.mixed_run import PlannerResult
from scheduler.sim.bench.registry import Claim
from scheduler.sim.bench.seeds import Spread, seed_spread
from scheduler.sim.evictions import CAUSES

# The targets B2 is held to, at every load: on the median over the seeds unless the name says worst (the worst
# seed) or the claim says "every seed"
TARGET_EFFECTIVE = 0.80
TARGET_EFFECTIVE_WORST = 0.72
TARGET_IDLE_WHILE_PENDING = 0.05
TARGET_IDLE_WHILE_PENDING_WORST = 0.08
TARGET_OVER_NAIVE = 2.0  # serving
TARGET_EVICTIONS_PER_8H = 30.0  # balanced
TARGET_ETA_P50 = 0.25
TARGET_ETA_P90 = 0.60
TARGET_AVOIDABLE_P95_CYCLES = 1  # production wait avoidable p95, on every seed
TARGET_AVOIDABLE_MAX_S = 30.0  # production wait avoidable max, on every seed

# Figures where more is better; every other figure (waits, idle shares, evictions, errors, run time, and any
# figure added later unless it is named here) is worse the higher it is
HIGHER_IS_BETTER = frozenset(
    {"effective_utilization", "allocation_ratio", "training_throughput", "completed", "eta_error.with_eta"}
)


def higher_is_better(key: str) -> bool:
    """Whether a larger value of the figure ``key`` is the better one (its worst seed is then the lowest)."""
    return key in HIGHER_IS_BETTER


def flat(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """One run's figures as ``name → number`` (None: not measured), the keys the summary spreads over seeds."""
    out: dict[str, float | None] = {}
    for key in (
        "effective_utilization",
        "allocation_ratio",
        "idle_while_pending",
        "training_throughput",
        "completed",
        "evictions",
        "evictions_per_8h",
        "moves_per_8h",
        "lost_gpu_hours",
        "rejected",
    ):
        out[key] = metrics.get(key)
    for cause in CAUSES:
        out[f"evictions.{cause}"] = metrics.get("evictions_by_cause", {}).get(cause)
    for stat in ("p50", "p95", "max"):
        out[f"production_inference_wait_s.{stat}"] = metrics["production_inference_wait_s"][stat]
    avoidable = metrics.get("production_avoidable_wait_s") or {}
    for stat in ("p95", "max"):
        out[f"production_avoidable_wait_s.{stat}"] = avoidable.get(stat)
    for cls in Priority:
        waits = metrics["queue_wait_s"].get(cls.value) or {}
        for stat in ("p50", "p95", "max", "still_waiting"):
            out[f"queue_wait_s.{cls.value}.{stat}"] = waits.get(stat)
    eta = metrics.get("eta_error") or {}
    for stat in ("p50", "p90", "waited", "with_eta"):
        out[f"eta_error.{stat}"] = eta.get(stat)
    return out


@dataclass(frozen=True)
class PlannerSummary:
    """One policy on one mix over the seeds."""

    name: str
    seeds: dict[int, PlannerResult]

    @property
    def ok(self) -> dict[int, PlannerResult]:
        return {seed: result for seed, result in self.seeds.items() if result.metrics is not None}

    @cached_property
    def figures(self) -> dict[str, Spread]:
        """Every figure's median, spread and worst seed (:func:`scheduler.sim.bench.seeds.seed_spread`)."""
        per_seed = {seed: flat(result.metrics) for seed, result in self.seeds.items() if result.metrics is not None}
        keys = list(next(iter(per_seed.values()))) if per_seed else []
        figures = {
            key: seed_spread({seed: row[key] for seed, row in per_seed.items()}, higher_is_better=higher_is_better(key))
            for key in keys
        }
        figures["plan_repairs"] = seed_spread(
            {s: r.plan_repairs for s, r in self.seeds.items()}, higher_is_better=False
        )
        figures["wall_s"] = seed_spread({s: r.wall_s for s, r in self.seeds.items()}, higher_is_better=False)
        return figures

    def median(self, key: str) -> float | None:
        return self.figures.get(key, {}).get("median")

    def as_dict(self) -> dict[str, Any]:
        failed = {str(seed): r.error for seed, r in self.seeds.items() if r.error is not None}  # JSON keys
        return {
            "status": "ok" if not failed else ("failed" if len(failed) == len(self.seeds) else "partly failed"),
            **({"errors": failed} if failed else {}),
            "median": self.figures,
            "seeds": {str(seed): result.as_dict() for seed, result in self.seeds.items()},
        }


def _share(target: float) -> str:
    return f"{target * 100:g} %"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _worst_pct(figure: Spread) -> str:
    return f"{_pct(figure['worst'])} (seed {figure['worst_seed']:g})" if figure["worst"] is not None else "-"


def _at_most(value: float | None, target: float) -> bool | None:
    return None if value is None else value <= target


def claims(
    mix: str,
    policies: Mapping[str, PlannerSummary],
    seeds: Sequence[int],
    *,
    load: float | None = None,
    cycle_s: float = 10.0,
) -> list[Claim]:
    """The B2 targets for ``mix`` (at ``load``, named in each claim), judged on microcosm's figures: the median,
    the worst seed or every seed, as each target says (module docstring); ``cycle_s``: the replay's cycle, the
    unit of the avoidable production wait."""
    ours, naive = policies.get("microcosm"), policies.get("naive")
    if ours is None or not ours.ok:
        return []
    tag = f"B2 {mix}" if load is None else f"B2 {mix} at load {load:g}"
    figures = ours.figures
    out = []
    effective = figures["effective_utilization"]
    median = effective["median"]
    assert median is not None
    out.append(
        Claim(
            f"{tag}: microcosm effective utilization ≥ {_share(TARGET_EFFECTIVE)} (median)",
            _pct(median),
            median >= TARGET_EFFECTIVE,
        )
    )
    assert effective["worst"] is not None
    out.append(
        Claim(
            f"{tag}: microcosm effective utilization ≥ {_share(TARGET_EFFECTIVE_WORST)} on the worst seed",
            _worst_pct(effective),
            effective["worst"] >= TARGET_EFFECTIVE_WORST,
        )
    )
    if mix == "serving" and naive is not None and naive.ok:
        base = naive.median("effective_utilization") or 0.0
        ratio = median / base if base else float("inf")
        out.append(
            Claim(
                f"{tag}: microcosm effective utilization ≥ {TARGET_OVER_NAIVE:g}× naive (medians)",
                f"{ratio:.2f}× ({_pct(median)} vs {_pct(base)})",
                ratio >= TARGET_OVER_NAIVE,
            )
        )
    idle = figures["idle_while_pending"]
    out.append(
        Claim(
            f"{tag}: idle_while_pending ≤ {_share(TARGET_IDLE_WHILE_PENDING)} (median)",
            _pct(idle["median"]),
            _at_most(idle["median"], TARGET_IDLE_WHILE_PENDING),
        )
    )
    out.append(
        Claim(
            f"{tag}: idle_while_pending ≤ {_share(TARGET_IDLE_WHILE_PENDING_WORST)} on the worst seed",
            _worst_pct(idle),
            _at_most(idle["worst"], TARGET_IDLE_WHILE_PENDING_WORST),
        )
    )
    one_cycle = TARGET_AVOIDABLE_P95_CYCLES * cycle_s
    for stat, target, text in (
        ("p95", one_cycle, f"one cycle ({one_cycle:g} s)"),
        ("max", TARGET_AVOIDABLE_MAX_S, f"{TARGET_AVOIDABLE_MAX_S:g} s"),
    ):
        avoidable = figures[f"production_avoidable_wait_s.{stat}"]
        worst, seed = avoidable["worst"], avoidable["worst_seed"]
        out.append(
            Claim(
                f"{tag}: production wait avoidable {stat} ≤ {text} on every seed",
                "no production job in the window"
                if worst is None or seed is None
                else f"worst seed {seed:g}: {worst:,.0f} s (median {avoidable['median'] or 0:,.0f} s)",
                _at_most(worst, target),
            )
        )
    if mix == "balanced":
        evictions = ours.median("evictions_per_8h")
        out.append(
            Claim(
                f"{tag}: evictions per 8 h window ≤ {TARGET_EVICTIONS_PER_8H:g} (median)",
                "-" if evictions is None else f"{evictions:g}",
                _at_most(evictions, TARGET_EVICTIONS_PER_8H),
            )
        )
    p50, p90 = ours.median("eta_error.p50"), ours.median("eta_error.p90")
    with_eta, waited = ours.median("eta_error.with_eta"), ours.median("eta_error.waited")
    out.append(
        Claim(
            f"{tag}: eta_error p50 ≤ {_share(TARGET_ETA_P50)} and p90 ≤ {_share(TARGET_ETA_P90)} (medians)",
            "no job that waited had a predicted start"
            if p50 is None or p90 is None
            else f"p50 {p50:.0%}, p90 {p90:.0%} ({with_eta:g} of {waited:g} waiting jobs had an ETA, median)",
            None if p50 is None or p90 is None else p50 <= TARGET_ETA_P50 and p90 <= TARGET_ETA_P90,
        )
    )
    return out
