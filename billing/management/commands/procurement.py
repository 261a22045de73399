"""``manage.py procurement advise|breakeven|waits [--json]``: the procurement advisor from the command line.

``advise`` reads the ledger's hourly demand for a GPU model (or a JSON/CSV series given with ``--series``)
and prints the reserved baseline, the spot share, the on-demand peak and the cost against all on-demand.
``breakeven`` prints colocation break-even months for one server (defaults: ``docs/gpu-facts.md``, Ownership
inputs and break-even), at the given
utilization or over a range of them. ``waits`` says, per GPU class, how long production waited although it
preempts lower work, and what to reserve or which burst limit to raise (from the cycles' record,
``billing.ProductionWait``). Formulas: billing/advisor.py.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from billing.advisor import (
    AdvisorInputError,
    BreakevenInputs,
    MixAdvice,
    TierPrices,
    advise_mix,
    breakeven,
    breakeven_curve,
    reserved_use_sentence,
)
from billing.procurement import (
    PURCHASE_UNIT_GPUS,
    WAIT_DAYS,
    catalog_prices,
    peak_provisioning,
    procurement_advise,
    production_wait_advise,
)
from billing.selectors import ledger_gpu_models


def _read_series(path: str) -> tuple[list[float], list[float] | None]:
    """A JSON list of numbers, a JSON object ``{"demand_gpus": [...], "spot_eligible_gpus": [...]}``, or a CSV
    with a ``demand_gpus`` column (and optionally ``spot_eligible_gpus``), one row per hour."""
    file = Path(path)
    if not file.is_file():
        raise CommandError(f"--series {path}: no such file")
    text = file.read_text()
    try:
        if file.suffix.lower() == ".csv":
            rows = list(csv.DictReader(text.splitlines()))
            if not rows or "demand_gpus" not in rows[0]:
                raise CommandError(f"--series {path}: a CSV needs a demand_gpus column, one row per hour")
            demand = [float(row["demand_gpus"]) for row in rows]
            spot = [float(row["spot_eligible_gpus"]) for row in rows] if "spot_eligible_gpus" in rows[0] else None
            return demand, spot
        data = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise CommandError(f"--series {path}: {exc}") from None
    if isinstance(data, list):
        return [float(v) for v in data], None
    if isinstance(data, dict) and isinstance(data.get("demand_gpus"), list):
        spot = data.get("spot_eligible_gpus")
        return [float(v) for v in data["demand_gpus"]], [float(v) for v in spot] if spot is not None else None
    raise CommandError(f'--series {path}: expected a list of numbers or {{"demand_gpus": [...]}}')


class Command(BaseCommand):
    help = (
        "Procurement advice: `advise` (reserved / spot / on-demand mix), `breakeven` (owning vs cloud) or `waits` "
        "(production wait: what to reserve, which burst limit to raise)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        advise = actions.add_parser("advise", help="Tier mix from the ledger's demand (or --series FILE).")
        advise.add_argument("--gpu-model", help="GPU model (default: the one with most GPU-hours in the ledger).")
        advise.add_argument("--days", type=int, default=30, help="Days of ledger history (default 30).")
        advise.add_argument("--series", help="Hourly demand from a JSON or CSV file instead of the ledger.")
        advise.add_argument("--percentile", type=float, help="Reserve this percentile of demand (0-100).")
        advise.add_argument("--purchase-unit", type=int, default=8, help="GPUs per reserved purchase (default 8).")
        advise.add_argument("--reserved-price", type=float, help="USD per GPU-hour (default: the catalog's).")
        advise.add_argument("--on-demand-price", type=float)
        advise.add_argument("--spot-price", type=float)
        advise.add_argument("--spot-lost", type=float, help="Share of spot work redone (default: from the ledger).")
        advise.add_argument("--json", action="store_true", help="Print JSON.")
        even = actions.add_parser("breakeven", help="Months until owning a server beats the cloud.")
        for field in fields(BreakevenInputs):
            flag = "--" + field.name.replace("_", "-")
            if field.type in ("bool", bool):
                even.add_argument(flag, action="store_true", help="Paid whether used or not.")
            else:
                kind = int if field.type in ("int", int) else float
                even.add_argument(flag, type=kind, default=field.default, help=f"default {field.default}")
        even.add_argument("--curve", action="store_true", help="Also every 5 %% of utilization.")
        even.add_argument("--json", action="store_true", help="Print JSON.")
        waits = actions.add_parser("waits", help="How long production waited per GPU class, and what would end it.")
        waits.add_argument("--days", type=int, default=WAIT_DAYS, help=f"Days to read (default {WAIT_DAYS}).")
        waits.add_argument(
            "--purchase-unit",
            type=int,
            default=PURCHASE_UNIT_GPUS,
            help=f"GPUs per reserved purchase (default {PURCHASE_UNIT_GPUS}).",
        )
        waits.add_argument("--json", action="store_true", help="Print JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["action"] == "advise":
                self._advise(options)
            elif options["action"] == "waits":
                self._waits(options)
            else:
                self._breakeven(options)
        except AdvisorInputError as exc:
            raise CommandError(str(exc)) from None

    def _prices(self, options: dict[str, Any], gpu_model: str | None) -> TierPrices | None:
        given = (options["reserved_price"], options["on_demand_price"], options["spot_price"])
        if all(value is None for value in given):
            return None
        if None in given:
            if gpu_model is None:
                raise CommandError("with --series, give all three of --reserved-price, --on-demand-price, --spot-price")
            base = catalog_prices(gpu_model=gpu_model, at=timezone.now())
            given = (
                given[0] if given[0] is not None else base.reserved,
                given[1] if given[1] is not None else base.on_demand,
                given[2] if given[2] is not None else base.spot,
            )
        return TierPrices(reserved=given[0], on_demand=given[1], spot=given[2])

    def _advise(self, options: dict[str, Any]) -> None:
        if options["series"]:
            demand, spot = _read_series(options["series"])
            prices = self._prices(options, options["gpu_model"])
            if prices is None:
                if not options["gpu_model"]:
                    raise CommandError("with --series, give --gpu-model (for catalog prices) or all three prices")
                prices = catalog_prices(gpu_model=options["gpu_model"], at=timezone.now())
            advice = advise_mix(
                demand_gpus=demand,
                spot_eligible_gpus=spot,
                prices=prices,
                percentile_q=options["percentile"],
                purchase_unit_gpus=options["purchase_unit"],
                spot_lost_fraction=options["spot_lost"] or 0.0,
                provisioning=peak_provisioning(options["gpu_model"]) if options["gpu_model"] else None,
            )
            model, lost = options["gpu_model"] or "(series)", options["spot_lost"] or 0.0
        else:
            model = options["gpu_model"] or next(iter(ledger_gpu_models()), None)
            if model is None:
                raise CommandError("the ledger is empty: run the cluster for a while, or give --series FILE")
            result = procurement_advise(
                gpu_model=model,
                now=timezone.now(),
                history_days=options["days"],
                percentile_q=options["percentile"],
                purchase_unit_gpus=options["purchase_unit"],
                prices=self._prices(options, model),
                spot_lost_fraction=options["spot_lost"],
            )
            advice, prices, lost = result.advice, result.prices, result.spot_lost_fraction
        if options["json"]:
            payload = {"gpu_model": model, "prices": asdict(prices), "spot_lost_fraction": lost, **advice.as_dict()}
            self.stdout.write(json.dumps(payload, indent=2))
            return
        a = advice
        lines = [
            f"{model}: {a.hours} hours, {a.demand_gpu_hours:,.1f} GPU-hours of demand",
            f"prices per GPU-hour: reserved ${prices.reserved:.4f}, on-demand ${prices.on_demand:.4f}, "
            f"spot ${prices.spot:.4f}; spot work redone {lost:.1%}",
            f"reserve      {a.baseline_gpus:g} GPUs (P{a.percentile:.0f} of hourly demand), {reserved_use_sentence(a)}",
            f"spot         {a.spot_gpu_hours:,.1f} GPU-hours ({a.spot_share or 0:.0%} of demand)"
            + (f": none advised, {a.spot_declined}" if a.spot_declined else ""),
            f"on-demand    {a.on_demand_gpu_hours:,.1f} GPU-hours, peak {a.on_demand_peak_gpus:.1f} GPUs",
            _peaks_line(a),
            f"cost         ${a.mix_cost:,.2f} (reserved ${a.reserved_cost:,.2f} + spot ${a.spot_cost:,.2f} "
            f"+ on-demand ${a.on_demand_cost:,.2f})",
            f"all on-demand ${a.all_on_demand_cost:,.2f}: saves ${a.savings:,.2f}"
            + (f" ({a.savings_pct:.1f} %)" if a.savings_pct is not None else ""),
        ]
        self.stdout.write("\n".join(lines))

    def _waits(self, options: dict[str, Any]) -> None:
        result = production_wait_advise(
            now=timezone.now(), days=options["days"], purchase_unit_gpus=options["purchase_unit"]
        )
        if options["json"]:
            payload = {
                "start": result.start.isoformat(),
                "end": result.end.isoformat(),
                "purchase_unit_gpus": result.purchase_unit_gpus,
                "classes": [asdict(advice) for advice in result.classes],
            }
            self.stdout.write(json.dumps(payload, indent=2))
            return
        if not result.classes:
            self.stdout.write(f"Production did not wait for want of capacity or burst limit {result.period}.")
            return
        self.stdout.write("\n".join(advice.sentence + "." for advice in result.classes))

    def _breakeven(self, options: dict[str, Any]) -> None:
        values = {field.name: options[field.name] for field in fields(BreakevenInputs)}
        inputs = BreakevenInputs(**values)
        result = breakeven(inputs)
        curve = breakeven_curve(inputs) if options["curve"] else []
        if options["json"]:
            payload = {"inputs": asdict(inputs), "result": asdict(result), "curve": [asdict(p) for p in curve]}
            self.stdout.write(json.dumps(payload, indent=2))
            return
        months = f"{result.months:.1f} months" if result.months is not None else "never (the cloud costs less)"
        lines = [
            f"own opex ${result.opex_usd_per_month:,.2f}/month (colo ${result.colo_usd_per_month:,.2f} + energy "
            f"${result.energy_usd_per_month:,.2f} + support ${result.support_usd_per_month:,.2f}), "
            f"capex ${result.capex_usd_per_month:,.2f}/month over {inputs.amortization_months} months",
            f"cloud ${result.cloud_usd_per_month:,.2f}/month at {inputs.utilization:.0%} utilization",
            f"break-even: {months}",
            f"per used GPU-hour: own ${result.own_usd_per_used_gpu_hour:.2f}, "
            f"cloud ${result.cloud_usd_per_used_gpu_hour:.2f}",
        ]
        for point in curve:
            shown = f"{point.months:6.1f}" if point.months is not None else " never"
            lines.append(
                f"  {point.utilization:4.0%}  {shown} months  own ${point.own_usd_per_used_gpu_hour:.2f}/GPU-h"
            )
        self.stdout.write("\n".join(lines))


def _peaks_line(a: MixAdvice) -> str:
    """How on-demand for peaks was priced: through the provisioning model, or as if instantly there."""
    p = a.provisioning
    if p is None:
        return "             priced as if on-demand were there at once (no provisioning model for this GPU model)"
    return (
        f"             asked for at the rises ({a.on_demand_requested_gpu_hours:,.1f} GPUs), billed request to "
        f"release: + {a.on_demand_boot_gpu_hours:,.1f} GPU-hours booting ({p.arrival_s / 60:.1f} min each), "
        f"+ {a.on_demand_idle_gpu_hours:,.1f} idle before release ({p.release_idle_s / 60:.0f} min); "
        f"{a.on_demand_late_gpu_hours:,.1f} GPU-hours of peak work start late, "
        f"{a.on_demand_stockout_gpu_hours:,.1f} of them on stockouts ({p.stockout:.0%} of requests)"
    )
