"""Input of the finance pages: the month picker and the procurement advisor's inputs, validated at the edge."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, cast

from django import forms
from django.utils import timezone

from billing.advisor import BreakevenInputs
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


class AdvisorForm(forms.Form):
    """Which demand to advise on and, optionally, prices and a percentile overriding the catalog's."""

    gpu_model = forms.ChoiceField(choices=(), label="GPU model")
    history_days = forms.IntegerField(
        min_value=1,
        max_value=366,
        initial=30,
        label="History (days)",
        help_text="Days of ledger demand, ending at the last closed hour.",
    )
    percentile = forms.FloatField(
        required=False, min_value=0, max_value=100, help_text="Empty: 100 × (1 − reserved / on-demand price)."
    )
    purchase_unit_gpus = forms.IntegerField(
        min_value=1, max_value=64, initial=8, help_text="GPUs per reserved instance."
    )
    reserved_price = forms.DecimalField(
        required=False, min_value=0, max_digits=10, decimal_places=4, label="Reserved price (USD/GPU-hour)"
    )
    on_demand_price = forms.DecimalField(
        required=False, min_value=0.0001, max_digits=10, decimal_places=4, label="On-demand price (USD/GPU-hour)"
    )
    spot_price = forms.DecimalField(
        required=False,
        min_value=0,
        max_digits=10,
        decimal_places=4,
        label="Spot price (USD/GPU-hour)",
        help_text="Empty prices: the catalog's in force now.",
    )
    spot_lost_fraction = forms.FloatField(
        required=False,
        min_value=0,
        max_value=0.95,
        label="Share of spot work lost",
        help_text="Empty: lost work / spot GPU-hours from the ledger.",
    )

    def __init__(self, *args: Any, gpu_models: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["gpu_model"]).choices = [(m, m) for m in gpu_models]
        if gpu_models:
            self.fields["gpu_model"].initial = gpu_models[0]


class BreakevenForm(forms.Form):
    """One server against the cloud; defaults are ``docs/gpu-facts.md``'s (billing.advisor.BreakevenInputs)."""

    capex_usd = forms.FloatField(min_value=1, label="Server price (USD)")
    gpus = forms.IntegerField(min_value=1, max_value=64, label="GPUs per server")
    power_max_kw = forms.FloatField(min_value=0.1, label="Power, maximum (kW)", help_text="Colocation bills this.")
    power_avg_kw = forms.FloatField(min_value=0, label="Power, average (kW)")
    pue = forms.FloatField(min_value=1, max_value=5, label="PUE")
    energy_usd_per_kwh = forms.FloatField(min_value=0, label="Energy (USD/kWh)")
    colo_usd_per_kw_month = forms.FloatField(min_value=0, label="Colocation (USD per kW-month)")
    support_usd_per_month = forms.FloatField(min_value=0, label="Support and operations (USD/month)")
    amortization_months = forms.IntegerField(min_value=1, max_value=120, label="Amortization (months)")
    cloud_usd_per_hour = forms.FloatField(min_value=0.01, label="Cloud price for the same GPUs (USD/hour)")
    cloud_committed = forms.BooleanField(required=False, label="Cloud is a commitment (paid whether used or not)")
    utilization_pct = forms.FloatField(min_value=1, max_value=100, label="Utilization (%)")

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
