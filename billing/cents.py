"""Money as finance reads it: US dollars in whole cents, rounded so that every column adds up to its total.

The ledger keeps micro-dollars (six decimals, ``billing.intervals.money``) so that its sums are exact; a report,
its files and its API hand finance cents. Rounding each cell on its own would leave a column whose cells add up
to a cent or two more or less than its total, so figures are *apportioned* instead (largest remainder, as
:func:`billing.report.share_pro_rata` shares idle capacity): every figure is its exact value rounded down to the
cent, and the cents still missing from the group's total, itself rounded half-even, go one each to the largest
remainders. The grand total is the exact total rounded; each team's total is apportioned from it; each row of a
team from the team's total. Every level therefore adds up to the level above, to the cent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal

from billing.report import ZERO, Report

CENT = Decimal("0.01")


def to_cents(value: Decimal) -> Decimal:
    """``value`` rounded half-even to the cent (a banker's rounding, as the ledger's micro-dollars are)."""
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def apportion(values: Sequence[Decimal], *, total: Decimal | None = None) -> list[Decimal]:
    """``values`` in cents adding up to ``total`` exactly (default: their exact sum rounded to the cent).

    Each value is floored to the cent; the cents left over go one each to the largest remainders (ties to the
    earlier value). A ``total`` more than a few cents from the values' sum is a caller's error.
    """
    target = to_cents(sum(values, Decimal(0)) if total is None else total)
    floors = [value.quantize(CENT, rounding=ROUND_FLOOR) for value in values]
    left = int((target - sum(floors, Decimal(0))) / CENT)
    if not values:
        return []
    if left < 0 or left > len(values):
        raise ValueError(f"cannot apportion {target} over {len(values)} figures adding up to {sum(values)}")
    order = sorted(range(len(values)), key=lambda i: (-(values[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += CENT
    return floors


@dataclass(frozen=True)
class ReportCents:
    """A report's money in cents, each level adding up to the one above (module doc).

    ``rows`` follows ``Report.rows()`` and ``other`` the idle-capacity then unused-commitment lines, in the order
    the summary file lists them (:func:`billing.exports.summary_records`).
    """

    total: Decimal  # the lines' total: the page's headline, the files' ``total`` row
    cluster_cost: Decimal
    usage: Decimal
    by_team: dict[str, Decimal]  # team slug → the team's total (usage + idle share)
    rows: list[tuple[Decimal, Decimal, Decimal]]  # (usage cost, idle share, total) per summary row
    other: list[Decimal]  # idle-capacity lines (when not shared), then unused commitments


def other_lines(report: Report) -> list[tuple[str, str, str, Decimal, Decimal]]:
    """The finance lines beside usage: (line, GPU model, tier, GPU-hours, cost), idle capacity first."""
    if not report.scope_all:
        return []
    lines: list[tuple[str, str, str, Decimal, Decimal]] = []
    if not report.idle_shared:
        lines += [
            ("idle-capacity", line.gpu_model, line.tier, line.idle_gpu_hours, line.idle_cost)
            for line in report.capacity
            if line.idle_cost or line.idle_gpu_hours
        ]
    lines += [
        ("unused-commitment", c.gpu_model, "reserved", c.unused_gpu_hours, c.unused_cost)
        for c in report.commitments
        if c.unused_cost
    ]
    return lines


def report_cents(report: Report) -> ReportCents:
    """Apportion ``report``'s money to the cent: lines total → teams and other lines → each team's rows; the
    usage column the same way from the usage total; a row's idle share is its total less its usage."""
    rows = report.rows()
    other = [cost for *_, cost in other_lines(report)]
    slugs = sorted({row.team_slug for row in rows})
    team_totals = {slug: sum((r.total for r in rows if r.team_slug == slug), ZERO) for slug in slugs}
    team_usage = {slug: sum((r.cost for r in rows if r.team_slug == slug), ZERO) for slug in slugs}
    top = apportion([*team_totals.values(), *other], total=report.lines_total)
    by_team = dict(zip(slugs, top[: len(slugs)], strict=True))
    usage_by_team = dict(zip(slugs, apportion(list(team_usage.values())), strict=True))
    row_totals: dict[int, Decimal] = {}
    row_usage: dict[int, Decimal] = {}
    for slug in slugs:
        members = [i for i, row in enumerate(rows) if row.team_slug == slug]
        row_totals.update(zip(members, apportion([rows[i].total for i in members], total=by_team[slug]), strict=True))
        row_usage.update(
            zip(members, apportion([rows[i].cost for i in members], total=usage_by_team[slug]), strict=True)
        )
    return ReportCents(
        total=sum(top, ZERO),
        cluster_cost=to_cents(report.cluster_cost),
        usage=sum(usage_by_team.values(), ZERO),
        by_team=by_team,
        rows=[(row_usage[i], row_totals[i] - row_usage[i], row_totals[i]) for i in range(len(rows))],
        other=top[len(slugs) :],
    )
