"""Input of the finance pages: the month picker and the procurement advisor's inputs, validated at the edge."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, cast

from django import forms
from django.utils import timezone

from billing.advisor import (
    BREAKEVEN_RANGES,
    MAX_PRICE_PER_GPU_HOUR,
    MAX_PURCHASE_UNIT_GPUS,
    BreakevenInputs,
    number_text,
)
from billing.errors import PeriodInvalid
from billing.periods import parse_month, period_for

_MODES = (("chargeback", "chargeback"), ("showback", "showback"))


class ReportForm(forms.Form):
    """``month`` (YYYY-MM; default this month) and an optional ``mode`` overriding the setting."""

    month = forms.CharField(required=False, max_length=20, help_text="YYYY-MM")
    mode = forms.ChoiceField(required=False, choices=(("", "setting"), *_MODES))

    def __init__(self, *args: Any, now: datetime | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = now or timezone.now()

    def clean_month(self) -> date:
        text = (self.cleaned_data.get("month") or "").strip()
        if not text:
            return date(self.now.year, self.now.month, 1)
        try:
            month = parse_month(text)
            period_for(month, now=self.now)
        except PeriodInvalid as exc:
            raise forms.ValidationError(str(exc)) from None
        return month


def _range_messages(label: str, low: float, high: float, unit: str, hint: str) -> dict[str, str]:
    if label.endswith(f"({unit})"):  # "Server price (USD)" names its unit already
        unit = ""
    text = f"{label} must be from {number_text(low)} to {number_text(high)} {unit}".rstrip() + f": {hint}."
    # Django fills these with %-formatting: a literal % (as in "100 %") must be doubled.
    text, invalid = text.replace("%", "%%"), f"{label} must be a number: {hint}.".replace("%", "%%")
    return {"min_value": text, "max_value": text, "invalid": invalid}


_PRICE_HINT = "the price of one GPU for one hour; leave it empty for the catalog's"


def _price_field(label: str, *, low: float, help_text: str = "") -> forms.DecimalField:
    return forms.DecimalField(
        required=False,
        min_value=low,
        max_value=MAX_PRICE_PER_GPU_HOUR,
        max_digits=10,
        decimal_places=4,
        label=label,
        help_text=help_text,
        error_messages={
            **_range_messages(label, low, MAX_PRICE_PER_GPU_HOUR, "", _PRICE_HINT),
            "max_digits": f"{label}: at most 4 decimals and {MAX_PRICE_PER_GPU_HOUR:g} USD: {_PRICE_HINT}.",
            "max_decimal_places": f"{label}: at most 4 decimals: {_PRICE_HINT}.",
            "max_whole_digits": f"{label}: at most {MAX_PRICE_PER_GPU_HOUR:g} USD: {_PRICE_HINT}.",
        },
    )


class AdvisorForm(forms.Form):
    """Which demand to advise on and, optionally, prices and a percentile overriding the catalog's; every input
    has a range and a message saying it (the CLI checks the same ranges in billing.advisor)."""

    gpu_model = forms.ChoiceField(
        choices=(),
        label="GPU model",
        error_messages={"invalid_choice": "%(value)s has no usage in the ledger: pick one of the listed models."},
    )
    history_days = forms.IntegerField(
        min_value=1,
        max_value=366,
        initial=30,
        label="History (days)",
        help_text="Days of ledger demand, ending at the last closed hour.",
        error_messages=_range_messages("History", 1, 366, "days", "how many days of the ledger to learn from"),
    )
    percentile = forms.FloatField(
        required=False,
        min_value=0,
        max_value=100,
        help_text="Empty: 100 × (1 − reserved / on-demand price).",
        error_messages=_range_messages("Percentile", 0, 100, "", "the demand level to reserve, e.g. 50 for the median"),
    )
    purchase_unit_gpus = forms.IntegerField(
        min_value=1,
        max_value=MAX_PURCHASE_UNIT_GPUS,
        initial=8,
        help_text="GPUs per reserved instance.",
        error_messages=_range_messages(
            "Purchase unit", 1, MAX_PURCHASE_UNIT_GPUS, "GPUs", "the GPUs of one reserved instance (8 for a p5)"
        ),
    )
    reserved_price = _price_field("Reserved price (USD/GPU-hour)", low=0)
    on_demand_price = _price_field("On-demand price (USD/GPU-hour)", low=0.0001)
    spot_price = _price_field("Spot price (USD/GPU-hour)", low=0, help_text="Empty prices: the catalog's in force now.")
    spot_lost_fraction = forms.FloatField(
        required=False,
        min_value=0,
        max_value=0.95,
        label="Share of spot work lost",
        help_text="0 to 0.95. Empty: lost work / spot GPU-hours from the ledger. Above 0.5 no spot is advised.",
        error_messages=_range_messages(
            "Share of spot work lost", 0, 0.95, "", "the share of spot work redone after interruptions, e.g. 0.1"
        ),
    )

    def __init__(self, *args: Any, gpu_models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["gpu_model"]).choices = [(m, m) for m in gpu_models]
        if gpu_models:
            self.fields["gpu_model"].initial = gpu_models[0]


def _bounded(name: str, label: str, *, integer: bool = False, **kwargs: Any) -> forms.Field:
    """A field with the range of ``BREAKEVEN_RANGES[name]`` (the CLI checks the same) and a message saying it."""
    bound = BREAKEVEN_RANGES[name]
    low = bound.low if not bound.open_low else 0.01
    messages = _range_messages(label, low, bound.high, bound.unit, bound.hint)
    if integer:
        return forms.IntegerField(
            min_value=int(bound.low), max_value=int(bound.high), label=label, error_messages=messages, **kwargs
        )
    return forms.FloatField(min_value=low, max_value=bound.high, label=label, error_messages=messages, **kwargs)


class BreakevenForm(forms.Form):
    """One server against the cloud; defaults are ``docs/gpu-facts.md``'s (billing.advisor.BreakevenInputs).

    Every input has a range (billing.advisor.BREAKEVEN_RANGES, shared with ``manage.py procurement``): a
    server price of 1e308 is refused with the range, not turned into a break-even of 1e303 months.
    """

    capex_usd = _bounded("capex_usd", "Server price (USD)")
    gpus = _bounded("gpus", "GPUs per server", integer=True)
    power_max_kw = _bounded("power_max_kw", "Power, maximum (kW)", help_text="Colocation bills this.")
    power_avg_kw = _bounded("power_avg_kw", "Power, average (kW)")
    pue = _bounded("pue", "PUE")
    energy_usd_per_kwh = _bounded("energy_usd_per_kwh", "Energy (USD/kWh)")
    colo_usd_per_kw_month = _bounded("colo_usd_per_kw_month", "Colocation (USD per kW-month)")
    support_usd_per_month = _bounded("support_usd_per_month", "Support and operations (USD/month)")
    amortization_months = _bounded("amortization_months", "Amortization (months)", integer=True)
    cloud_usd_per_hour = _bounded("cloud_usd_per_hour", "Cloud price for the same GPUs (USD/hour)")
    cloud_committed = forms.BooleanField(required=False, label="Cloud is a commitment (paid whether used or not)")
    utilization_pct = forms.FloatField(
        min_value=1,
        max_value=100,
        label="Utilization (%)",
        error_messages=_range_messages(
            "Utilization", 1, 100, "%", "the share of hours the GPUs are busy, in percent (70 for 70 %)"
        ),
    )

    @classmethod
    def initial_values(cls) -> dict[str, object]:
        defaults = BreakevenInputs()
        return {
            name: getattr(defaults, name)
            for name in cls.base_fields
            if name != "utilization_pct" and hasattr(defaults, name)
        } | {"utilization_pct": 70.0}

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        low, high = data.get("power_avg_kw"), data.get("power_max_kw")
        if isinstance(low, float) and isinstance(high, float) and low > high:
            self.add_error("power_avg_kw", f"Average power ({low} kW) cannot exceed the maximum ({high} kW).")
        return data

    def inputs(self) -> BreakevenInputs:
        data = self.cleaned_data
        return BreakevenInputs(
            capex_usd=data["capex_usd"],
            gpus=data["gpus"],
            power_max_kw=data["power_max_kw"],
            power_avg_kw=data["power_avg_kw"],
            pue=data["pue"],
            energy_usd_per_kwh=data["energy_usd_per_kwh"],
            colo_usd_per_kw_month=data["colo_usd_per_kw_month"],
            support_usd_per_month=data["support_usd_per_month"],
            amortization_months=data["amortization_months"],
            cloud_usd_per_hour=data["cloud_usd_per_hour"],
            cloud_committed=data["cloud_committed"],
            utilization=data["utilization_pct"] / 100,
        )
