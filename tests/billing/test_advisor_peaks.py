"""The advisor's on-demand for peaks through the provisioning model (billing/advisor.py, module docstring;
scheduler/core/gpus/arrival.py): asked for at the rises, billed from request to release, late on arrival and
stockouts — worked by hand."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from billing.advisor import AdvisorInputError, PeakProvisioning, TierPrices, advise_mix
from billing.procurement import peak_provisioning
from scheduler.core import Policy, arrival_model

PRICES = TierPrices(reserved=0.65, on_demand=1.0, spot=0.3)
PEAKY = [0, 4, 4, 0, 2]  # with percentile 0 nothing is reserved: every GPU-hour is on-demand
MODEL = PeakProvisioning(arrival_s=1800.0, stockout=0.1, fail_after_s=900.0, release_idle_s=600.0)


def test_peaks_are_billed_from_request_to_release_and_start_late() -> None:
    """Rises 4 (hour 1) + 2 (hour 4) = 6 GPUs asked for; falls 4 (hour 3). Boot: 6 × 0.9 × 0.5 h = 2.7;
    idle before release: 4 × 600/3600 = 0.667; late: 6 × 0.5 + stockouts 6 × 0.1 × 0.25 = 3.0 + 0.15."""
    advice = advise_mix(demand_gpus=PEAKY, spot_eligible_gpus=None, prices=PRICES, percentile_q=0, provisioning=MODEL)
    assert advice.baseline_gpus == 0 and advice.on_demand_gpu_hours == 10
    assert advice.on_demand_requested_gpu_hours == 6
    assert advice.on_demand_boot_gpu_hours == pytest.approx(2.7)
    assert advice.on_demand_idle_gpu_hours == pytest.approx(4 / 6)
    assert advice.on_demand_stockout_gpu_hours == pytest.approx(0.15)
    assert advice.on_demand_late_gpu_hours == pytest.approx(3.15)
    assert advice.on_demand_cost == pytest.approx(10 + 2.7 + 4 / 6)
    assert advice.mix_cost == pytest.approx(advice.on_demand_cost)
    assert advice.savings == pytest.approx(10 - advice.mix_cost)  # all on-demand is the demand at list price


def test_without_a_model_on_demand_is_there_at_once() -> None:
    advice = advise_mix(demand_gpus=PEAKY, spot_eligible_gpus=None, prices=PRICES, percentile_q=0)
    assert (advice.on_demand_cost, advice.on_demand_requested_gpu_hours) == (10, 6)
    assert advice.on_demand_boot_gpu_hours == advice.on_demand_late_gpu_hours == 0
    assert advice.provisioning is None


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (PeakProvisioning(-1.0, 0.1, 900.0, 600.0), "arrival s must be 0 to 86400 seconds"),
        (PeakProvisioning(600.0, 0.1, float("inf"), 600.0), "fail after s must be"),
        (PeakProvisioning(600.0, 1.0, 900.0, 600.0), "stockout probability must be in"),
    ],
)
def test_a_bad_model_is_refused_naming_the_field(model: PeakProvisioning, message: str) -> None:
    with pytest.raises(AdvisorInputError, match=message):
        advise_mix(demand_gpus=PEAKY, spot_eligible_gpus=None, prices=PRICES, provisioning=model)


def test_the_advisor_reads_the_engines_provisioning_model() -> None:
    model = peak_provisioning("H100-SXM5-80GB")
    assert model is not None
    source = arrival_model("H100-SXM5-80GB")
    assert (model.arrival_s, model.stockout, model.fail_after_s) == (
        source.expected_s,
        source.stockout(1),
        source.fail_after_s,
    )
    assert model.release_idle_s == Policy().release_idle_s
    assert peak_provisioning("T4") is None  # not in the catalog: priced as if there at once


def test_the_advise_command_prices_peaks_with_the_model(tmp_path, capsys) -> None:
    series = tmp_path / "demand.json"
    series.write_text(json.dumps(PEAKY))
    prices = ["--reserved-price", "0.65", "--on-demand-price", "1", "--spot-price", "0.3", "--percentile", "0"]
    call_command("procurement", "advise", "--series", str(series), "--gpu-model", "H100-SXM5-80GB", *prices)
    out = capsys.readouterr().out
    assert "billed request to release" in out and "on stockouts (10% of requests)" in out
    call_command("procurement", "advise", "--series", str(series), *prices, "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["provisioning"] is None and data["on_demand_cost"] == 10
    call_command("procurement", "advise", "--series", str(series), *prices)
    assert "priced as if on-demand were there at once" in capsys.readouterr().out
