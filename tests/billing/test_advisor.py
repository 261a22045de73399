"""Procurement advisor: tier mix and colocation break-even against worked examples computed by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from billing import views as billing_views
from billing.advisor import (
    AdvisorInputError,
    BreakevenInputs,
    TierPrices,
    advise_mix,
    breakeven,
    breakeven_curve,
    critical_percentile,
    percentile,
)
from billing.forms import BreakevenForm
from tests.billing.conftest import NOW

PRICES = TierPrices(reserved=0.65, on_demand=1.0, spot=0.3)
DEMAND = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
ELIGIBLE = [0, 0, 0, 0, 0, 0, 0, 2, 2, 2]


def test_breakeven_matches_the_facts_sheet_worked_example():
    """``docs/gpu-facts.md``, Ownership inputs and break-even, by hand, for an 8×H100 server against AWS p5 on-demand
    ($55.04/h):

    colo   = 10.2 kW × $184.06          = $1,877.412 / month
    energy = 7.5 kW × 730 h × 1.3 × $0.08 = $569.40 / month
    opex   = 1,877.412 + 569.40 + 2,500  = $4,946.812 / month
    cloud at 100 % = 55.04 × 730         = $40,179.20 / month
    break-even = 300,000 / (40,179.20 − 4,946.812) = 300,000 / 35,232.388 = 8.5149 months
    at 70 %: 300,000 / (28,125.44 − 4,946.812) = 12.9430;  at 50 %: 300,000 / (20,089.60 − 4,946.812) = 19.8114
    own cost per GPU-hour at 100 %: (4,946.812 + 300,000 / 36) / (8 × 730) = 13,280.145 / 5,840 = $2.2740
    (that section's table: 8.5, 12.9, 19.8 months and ≈ $2.27 per GPU-hour).
    """
    result = breakeven(BreakevenInputs())
    assert result.colo_usd_per_month == pytest.approx(1877.412)
    assert result.energy_usd_per_month == pytest.approx(569.40)
    assert result.opex_usd_per_month == pytest.approx(4946.812)
    assert result.cloud_usd_per_month == pytest.approx(40179.20)
    assert result.months == pytest.approx(8.5149, abs=1e-4)
    assert result.own_usd_per_used_gpu_hour == pytest.approx(2.2740, abs=1e-4)
    assert breakeven(BreakevenInputs(utilization=0.7)).months == pytest.approx(12.9430, abs=1e-4)
    assert breakeven(BreakevenInputs(utilization=0.5)).months == pytest.approx(19.8114, abs=1e-4)


def test_a_commitment_breaks_even_regardless_of_utilization():
    """Azure 3-yr RI for 8×H100, §7.3: $31,509 / month = $43.163/h over 730 h; paid whether used or not, so
    300,000 / (31,509 − 4,946.812) = 11.294 months at any utilization (facts table: 11.3)."""
    inputs = BreakevenInputs(cloud_usd_per_hour=31_509 / 730, cloud_committed=True)
    assert breakeven(replace(inputs, utilization=0.3)).months == pytest.approx(11.294, abs=1e-3)
    assert breakeven(replace(inputs, utilization=1.0)).months == pytest.approx(11.294, abs=1e-3)


def test_a_cloud_cheaper_than_running_the_server_never_breaks_even():
    assert breakeven(BreakevenInputs(utilization=0.05)).months is None
    curve = breakeven_curve(BreakevenInputs(), steps=20)
    assert [round(p.utilization, 2) for p in curve][:2] == [0.05, 0.1] and curve[-1].utilization == 1.0
    months = [p.months for p in curve if p.months is not None]
    assert months == sorted(months, reverse=True)  # busier servers pay back sooner


def test_the_tier_mix_worked_by_hand():
    """Demand 0…9 GPUs over 10 hours; spot-eligible 2 GPUs in the last three; reserved $0.65, on-demand $1,
    spot $0.30.

    percentile = 100 × (1 − 0.65 / 1) = 35; rank 0.35 × 9 = 3.15 → 3 + 0.15 × (4 − 3) = 3.15 → 4 GPUs reserved.
    excess over 4: 0,0,0,0,0,1,2,3,4,5 (15 GPU-h); spot = min(excess, eligible) = 2+2+2 = 6; on-demand 9,
    peak on-demand = 5 − 2 = 3.  cost = 4 × 10 × 0.65 + 6 × 0.30 + 9 × 1 = 26 + 1.8 + 9 = $36.80;
    all on-demand = 45 GPU-h × $1 = $45 → saves $8.20 (18.2 %).
    """
    advice = advise_mix(demand_gpus=DEMAND, spot_eligible_gpus=ELIGIBLE, prices=PRICES)
    assert advice.percentile == pytest.approx(35.0)
    assert advice.baseline_gpus == 4
    assert (advice.spot_gpu_hours, advice.on_demand_gpu_hours, advice.on_demand_peak_gpus) == (6, 9, 3)
    assert advice.mix_cost == pytest.approx(36.8)
    assert advice.all_on_demand_cost == pytest.approx(45.0)
    assert advice.savings == pytest.approx(8.2)
    assert advice.reserved_utilization == pytest.approx(30 / 40)  # 0+1+2+3+4×6 = 30 of 40 reserved GPU-h


def test_lost_spot_work_is_paid_again_and_units_round_the_baseline_up():
    """With a tenth of spot work lost, 6 GPU-h of spot work cost 6 / 0.9 = 6.667 GPU-h; reserved in units of 8
    rounds 3.15 up to 8 GPUs, which leaves only hour 9 (1 GPU above 8, not spot-eligible … eligible 2) on spot."""
    lossy = advise_mix(demand_gpus=DEMAND, spot_eligible_gpus=ELIGIBLE, prices=PRICES, spot_lost_fraction=0.1)
    assert lossy.spot_rework_gpu_hours == pytest.approx(6 / 0.9 - 6)
    assert lossy.spot_cost == pytest.approx(6 / 0.9 * 0.3)
    eight = advise_mix(demand_gpus=DEMAND, spot_eligible_gpus=ELIGIBLE, prices=PRICES, purchase_unit_gpus=8)
    assert eight.baseline_gpus == 8 and eight.spot_gpu_hours == 1 and eight.on_demand_gpu_hours == 0


def test_percentiles_and_the_critical_ratio():
    assert percentile([5.0], 50) == 5.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert critical_percentile(TierPrices(reserved=2, on_demand=1, spot=0.5)) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"demand_gpus": []}, "demand series is empty"),
        ({"demand_gpus": [1, -2]}, "finite numbers of GPUs"),
        ({"spot_eligible_gpus": [1]}, "spot-eligible series has 1 hours"),
        ({"prices": TierPrices(reserved=1, on_demand=0, spot=1)}, "on-demand price must be above 0"),
        ({"prices": TierPrices(reserved=-1, on_demand=1, spot=1)}, "reserved price must be a number"),
        ({"percentile_q": 120}, "outside 0–100"),
        ({"spot_lost_fraction": 1.0}, "share of spot work lost"),
        ({"purchase_unit_gpus": 0}, "purchase unit"),
        ({"purchase_unit_gpus": 65}, "purchase unit must be 1 to 64 GPUs"),
        ({"prices": TierPrices(reserved=1e308, on_demand=1, spot=1)}, "reserved price must be a number from 0 to 100"),
    ],
)
def test_bad_advisor_input_says_what_is_wrong(kwargs, message):
    arguments = {"demand_gpus": [1, 2], "spot_eligible_gpus": None, "prices": PRICES, **kwargs}
    with pytest.raises(AdvisorInputError, match=message):
        advise_mix(**arguments)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pue": 0.8}, "pue must be at least 1 and at most 5"),
        ({"utilization": 1.5}, "utilization must be above 0"),
        ({"utilization": 0.0}, "utilization must be above 0"),
        ({"capex_usd": 0}, "capex_usd must be at least 1,000"),
        ({"capex_usd": 1e308}, "capex_usd must be at least 1,000 and at most 10,000,000 USD, got 1e"),
        ({"capex_usd": float("inf")}, "capex_usd must be"),
        ({"amortization_months": 0}, "amortization_months must be at least 1"),
        ({"cloud_usd_per_hour": 0.0}, "cloud_usd_per_hour must be above 0"),
        ({"power_avg_kw": 11.0}, "above the maximum"),
        ({"energy_usd_per_kwh": -0.1}, "energy_usd_per_kwh must be at least 0"),
    ],
)
def test_bad_breakeven_input_says_what_is_wrong(change, message):
    with pytest.raises(AdvisorInputError, match=message):
        breakeven(replace(BreakevenInputs(), **change))


# -- the command ----------------------------------------------------------------------------------------


def test_breakeven_command_prints_json(capsys):
    call_command("procurement", "breakeven", "--utilization", "0.7", "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["result"]["months"] == pytest.approx(12.9430, abs=1e-4)


def test_breakeven_command_refuses_bad_input():
    with pytest.raises(CommandError, match="pue must be at least 1 and at most 5"):
        call_command("procurement", "breakeven", "--pue", "0.5")
    with pytest.raises(CommandError, match=r"capex_usd must be .* at most 10,000,000 USD, got 1e\+308: the purchase"):
        call_command("procurement", "breakeven", "--capex-usd", "1e308")
    with pytest.raises(CommandError, match="amortization_months must be at least 1"):
        call_command("procurement", "breakeven", "--amortization-months", "0")
    with pytest.raises(CommandError, match="utilization must be above 0"):
        call_command("procurement", "breakeven", "--utilization", "0")


def test_advise_command_reads_a_series_file(tmp_path, capsys):
    series = tmp_path / "demand.json"
    series.write_text(json.dumps({"demand_gpus": DEMAND, "spot_eligible_gpus": ELIGIBLE}))
    call_command(
        "procurement",
        "advise",
        "--series",
        str(series),
        "--reserved-price",
        "0.65",
        "--on-demand-price",
        "1",
        "--spot-price",
        "0.3",
        "--purchase-unit",
        "1",
        "--json",
    )
    data = json.loads(capsys.readouterr().out)
    assert (data["baseline_gpus"], data["mix_cost"]) == (4, pytest.approx(36.8))
    call_command(
        "procurement",
        "advise",
        "--series",
        str(series),
        "--reserved-price",
        "0.65",
        "--on-demand-price",
        "1",
        "--spot-price",
        "0.3",
        "--purchase-unit",
        "1",
    )
    assert "reserve      4 GPUs (P35 of hourly demand)" in capsys.readouterr().out


def test_advise_command_explains_a_missing_series(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        call_command("procurement", "advise", "--series", str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.csv"
    bad.write_text("hour,gpus\n1,2\n")
    with pytest.raises(CommandError, match="demand_gpus column"):
        call_command("procurement", "advise", "--series", str(bad), "--gpu-model", "x")


@pytest.mark.django_db
def test_advise_command_reads_the_ledger(october, capsys, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    call_command("procurement", "advise", "--gpu-model", "A100-SXM4-80GB", "--days", "60", "--json")
    data = json.loads(capsys.readouterr().out)
    # One A100 for 24 of the 1,440 hours: the baseline (P33 with $2 reserved vs $3→$2.50 on-demand) is 0.
    assert data["demand_gpu_hours"] == pytest.approx(24.0)
    assert data["hours"] == 60 * 24 and data["baseline_gpus"] == 0
    assert data["prices"] == {"reserved": 2.0, "on_demand": 2.5, "spot": 1.0}


@pytest.mark.django_db
def test_advise_command_on_an_empty_ledger_says_so(db):
    with pytest.raises(CommandError, match="ledger is empty"):
        call_command("procurement", "advise")


# -- the page -------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_advisor_page_shows_a_mix_and_a_curve(client, october, finance_user, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client.force_login(finance_user)
    first = client.get(reverse("billing:advisor")).content.decode()
    # The first visit advises on the last 30 days, which saw no A100 work: it says so and still shows the curve.
    assert "the ledger has no A100-SXM4-80GB usage" in first and 'id="fig-breakeven"' in first
    params = {**BreakevenForm.initial_values(), "gpu_model": "A100-SXM4-80GB", "history_days": 60}
    response = client.get(reverse("billing:advisor"), {**params, "purchase_unit_gpus": 1})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="mix"' in page and 'id="fig-tier-mix"' in page
    assert 'data-testid="peaks">On-demand for peaks is asked for' in page and "5 % of requests" in page
    assert 'id="fig-breakeven"' in page
    assert 'data-testid="breakeven-months"><strong>12.9 months' in page  # 70 % by default


@pytest.mark.django_db
def test_the_advisor_form_puts_errors_next_to_their_fields(client, october, finance_user, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client.force_login(finance_user)
    params = {
        "gpu_model": "A100-SXM4-80GB",
        "history_days": "0",
        "purchase_unit_gpus": "8",
        **{
            k: v
            for k, v in {
                "capex_usd": 300000,
                "gpus": 8,
                "power_max_kw": 10.2,
                "power_avg_kw": 12,
                "pue": 0.5,
                "energy_usd_per_kwh": 0.08,
                "colo_usd_per_kw_month": 184.06,
                "support_usd_per_month": 2500,
                "amortization_months": 36,
                "cloud_usd_per_hour": 55.04,
                "utilization_pct": 70,
            }.items()
        },
    }
    response = client.get(reverse("billing:advisor"), params)
    page = response.content.decode()
    assert response.status_code == 400
    assert 'id="history_days-errors"' in page and 'id="pue-errors"' in page and 'id="power_avg_kw-errors"' in page
    assert "cannot exceed the maximum" in page


@pytest.mark.django_db
def test_the_advisor_says_when_the_ledger_has_no_demand(client, october, finance_user, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client.force_login(finance_user)
    response = client.get(
        reverse("billing:advisor"), {"gpu_model": "A100-SXM4-80GB", "history_days": "3", "purchase_unit_gpus": "8"}
    )
    assert response.status_code == 400
    assert "the ledger has no A100-SXM4-80GB usage" in response.content.decode()


@pytest.mark.django_db
def test_the_advisor_takes_stated_prices_and_the_catalog_s_for_the_empty_ones(
    client, october, finance_user, monkeypatch
):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    used: list[TierPrices | None] = []
    advise = billing_views.procurement_advise

    def spy(**kwargs):
        used.append(kwargs["prices"])
        return advise(**kwargs)

    monkeypatch.setattr(billing_views, "procurement_advise", spy)
    client.force_login(finance_user)
    params = {**BreakevenForm.initial_values(), "gpu_model": "A100-SXM4-80GB", "history_days": 60}
    params["purchase_unit_gpus"] = 1
    assert client.get(reverse("billing:advisor"), {**params, "spot_price": "0.5"}).status_code == 200
    assert client.get(reverse("billing:advisor"), params).status_code == 200
    # All three stated: the catalog is not read (a model without catalog prices still gets advice).
    monkeypatch.setattr(billing_views, "catalog_prices", lambda **_: pytest.fail("the catalog was read"))
    stated = {"reserved_price": "1", "on_demand_price": "3", "spot_price": "0.25"}
    assert client.get(reverse("billing:advisor"), {**params, **stated}).status_code == 200
    assert used == [
        TierPrices(reserved=2.0, on_demand=2.5, spot=0.5),  # the catalog's reserved and on-demand
        None,  # nothing stated: procurement_advise reads the catalog itself
        TierPrices(reserved=1.0, on_demand=3.0, spot=0.25),
    ]


# -- spot at an absurd lost-work share, and the sentences ---------------------------------------------------------


@pytest.mark.parametrize("lost", [0.51, 0.8, 0.95])
def test_no_spot_is_advised_when_more_than_half_the_spot_work_is_lost(lost):
    # Spot is very cheap here (a useful hour still beats on-demand up to 97 % lost): the share alone declines it.
    cheap = TierPrices(reserved=0.65, on_demand=1.0, spot=0.03)
    advice = advise_mix(demand_gpus=DEMAND, spot_eligible_gpus=ELIGIBLE, prices=cheap, spot_lost_fraction=lost)
    assert advice.spot_gpu_hours == 0 and advice.spot_cost == 0 and advice.spot_share == 0
    assert advice.spot_declined.startswith(f"{lost:.0%} of spot work was lost, above the 50% at which spot")
    assert advice.on_demand_gpu_hours == pytest.approx(15)  # the excess over 4 reserved GPUs, all on demand


def test_spot_is_declined_when_a_useful_spot_hour_costs_more_than_on_demand():
    # 0.3 / (1 − 0.4) = $0.50 < $1: advised; 0.6 / (1 − 0.4) = $1.00, not less than $1: declined.
    advised = advise_mix(demand_gpus=DEMAND, spot_eligible_gpus=ELIGIBLE, prices=PRICES, spot_lost_fraction=0.4)
    assert advised.spot_gpu_hours == 6 and advised.spot_declined == ""
    dear = replace(PRICES, spot=0.6)
    declined = advise_mix(demand_gpus=DEMAND, spot_eligible_gpus=ELIGIBLE, prices=dear, spot_lost_fraction=0.4)
    assert declined.spot_gpu_hours == 0
    assert declined.spot_declined == (
        "with 40% of spot work redone a useful spot GPU-hour costs $1.0000, not less than on-demand's $1.0000"
    )


def test_the_advise_command_says_why_no_spot_and_completes_the_reserved_sentence(tmp_path, capsys):
    series = tmp_path / "demand.json"
    series.write_text(json.dumps({"demand_gpus": [0, 0, 0, 5], "spot_eligible_gpus": [0, 0, 0, 5]}))
    prices = ["--reserved-price", "0.65", "--on-demand-price", "1", "--spot-price", "0.3"]
    call_command(
        "procurement", "advise", "--series", str(series), *prices, "--spot-lost", "0.95", "--purchase-unit", "1"
    )
    out = capsys.readouterr().out
    assert "nothing is reserved: demand at this percentile is 0 GPUs" in out
    assert "none advised, 95% of spot work was lost" in out
    assert "busy 0%" not in out
    with pytest.raises(CommandError, match="history must be 1 to 366 days, got 0"):
        call_command("procurement", "advise", "--gpu-model", "A100-SXM4-80GB", "--days", "0")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("capex_usd", "1e308", "Server price (USD) must be from 1,000 to 10,000,000: the purchase price"),
        ("capex_usd", "nan", "Server price (USD) must be"),
        ("utilization_pct", "0", "Utilization must be from 1 to 100 %"),
        ("utilization_pct", "150", "Utilization must be from 1 to 100 %"),
        ("amortization_months", "0", "Amortization (months) must be from 1 to 120: months"),
        ("cloud_usd_per_hour", "0", "Cloud price for the same GPUs (USD/hour) must be from 0.01"),
    ],
)
def test_the_breakeven_form_refuses_out_of_range_inputs_with_the_range(field, value, message):
    form = BreakevenForm({**BreakevenForm.initial_values(), field: value})
    assert not form.is_valid()
    assert any(error.startswith(message) for error in form.errors[field]), form.errors[field]


@pytest.mark.django_db
def test_the_advisor_page_completes_the_reserved_sentence_and_declines_spot(client, october, finance_user, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    client.force_login(finance_user)
    params = {
        "gpu_model": "A100-SXM4-80GB",
        "history_days": "60",
        "purchase_unit_gpus": "8",
        "percentile": "0",
        "spot_lost_fraction": "0.95",
        **{k: str(v) for k, v in BreakevenForm.initial_values().items()},
    }
    response = client.get(reverse("billing:advisor"), params)
    page = response.content.decode()
    assert response.status_code == 200, page[:2000]
    assert "is used — of the time" not in page and " — of the time" not in page
    assert 'data-testid="reserved-use">Nothing is reserved: demand at this percentile is 0 GPUs' in page
    assert 'data-testid="spot-declined">No spot advised: 95% of spot work was lost' in page
    response = client.get(reverse("billing:advisor"), {**params, "capex_usd": "1e308", "reserved_price": "1e9"})
    page = response.content.decode()
    assert response.status_code == 400
    assert "Server price (USD) must be from 1,000 to 10,000,000: the purchase price" in page
    assert 'id="reserved_price-errors"' in page
