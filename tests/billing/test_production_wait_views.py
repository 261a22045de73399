"""Where the production wait advice shows: the procurement advisor (finance, platform admins), ``manage.py
procurement waits``, and the cluster view (platform admins only: it names every team's burst limit)."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from billing.advisor import AdvisorInputError
from billing.models import ProductionWait
from billing.procurement import production_wait_advise
from teams.models import Quota
from tests.billing.conftest import NOW

pytestmark = pytest.mark.django_db

SENTENCE = (
    "Production waited 10 min in the last week on H100: reserve 8 more H100 GPUs, "
    "or raise team nlp&#x27;s burst on H100 from 4 to 6 GPUs"
)


@pytest.fixture(autouse=True)
def _now(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def waits(team):
    """An hour ago, 60 cycles of 10 s: 3 H100 GPUs of production short of capacity, and team nlp's 2 refused by its
    burst limit of 4 on H100 while it held 4 (it needed 6); 8 days ago, a wait the week no longer counts."""
    Quota.objects.create(team=team, gpu_class="H100", guaranteed_gpus=Decimal(2), burst_gpus=Decimal(4))
    start = NOW - timedelta(hours=1)
    rows = []
    for i in range(60):
        at = start + timedelta(seconds=10 * i)
        rows.append(
            ProductionWait(
                at=at, gpu_class="H100", cause="held", gpu_units=4 * 7000, short_units=3 * 7000, jobs=2, seconds=10
            )
        )
        rows.append(
            ProductionWait(
                at=at,
                gpu_class="H100",
                cause="burst",
                team=team,
                gpu_units=2 * 7000,
                scope="H100",
                need_units=6 * 7000,
                jobs=1,
                seconds=10,
            )
        )
    old = NOW - timedelta(days=8)
    rows.append(
        ProductionWait(at=old, gpu_class="A100", cause="held", gpu_units=7000, short_units=7000, jobs=1, seconds=10)
    )
    ProductionWait.objects.bulk_create(rows)


def test_the_service_reads_the_week_and_the_burst_limits_in_force(waits) -> None:
    result = production_wait_advise(now=NOW)

    (h100,) = result.classes  # the A100 wait of 8 days ago is outside the week
    assert h100.hours == pytest.approx(600 / 3600)
    assert h100.held is not None and (h100.held.short_p95_gpus, h100.held.reserve_gpus) == (3.0, 8)
    (nlp,) = h100.bursts
    assert (nlp.team, nlp.scope, nlp.limit_gpus, nlp.raise_to_gpus) == ("nlp", "H100", 4.0, 6)
    assert [c.gpu_class for c in production_wait_advise(now=NOW, days=9).classes] == ["H100", "A100"]


def test_the_limit_in_force_now_is_read(waits, team) -> None:
    Quota.objects.filter(team=team, gpu_class="H100").update(burst_gpus=Decimal(5))
    assert "from 5 to 6 GPUs" in production_wait_advise(now=NOW).classes[0].sentence
    Quota.objects.filter(team=team, gpu_class="H100").delete()
    Quota.objects.create(team=team, gpu_class="any", guaranteed_gpus=Decimal(8), burst_gpus=Decimal(10))
    sentence = production_wait_advise(now=NOW).classes[0].sentence
    assert sentence.endswith("team nlp has no burst limit on H100 now (removed since): nothing to raise")


@pytest.mark.parametrize(
    "fields",
    [
        {"cause": "held", "scope": "H100"},  # a held wait has no limit
        {"cause": "burst", "scope": ""},  # a burst wait names its limit
        {"cause": "burst", "scope": "any", "short_units": 7000},  # and had room
    ],
)
def test_a_row_keeps_the_fields_of_its_cause(team, fields) -> None:
    fields = {**fields, "team": team if fields["cause"] == "burst" else None}
    with pytest.raises(IntegrityError), transaction.atomic():
        ProductionWait.objects.create(at=NOW, gpu_class="H100", gpu_units=7000, jobs=1, seconds=10, **fields)


def test_the_period_is_checked(db) -> None:
    with pytest.raises(AdvisorInputError, match="the period must be 1 to 366 days, got 0"):
        production_wait_advise(now=NOW, days=0)


@pytest.mark.parametrize("persona", ["finance_user", "platform_admin"])
def test_finance_and_admins_see_it_on_the_procurement_advisor(client, waits, request, persona) -> None:
    client.force_login(request.getfixturevalue(persona))
    page = client.get(reverse("billing:advisor")).content.decode()
    assert 'data-testid="production-wait"' in page and SENTENCE in page
    unit_of_one = client.get(reverse("billing:advisor"), {"purchase_unit_gpus": 1, "history_days": 30})
    assert "reserve 3 more H100 GPUs" in unit_of_one.content.decode()


@pytest.mark.parametrize("persona", ["lead", "member", "outsider"])
def test_no_one_else_reaches_the_advisor(client, waits, request, persona) -> None:
    client.force_login(request.getfixturevalue(persona))
    assert client.get(reverse("billing:advisor")).status_code == 403


def test_the_advisor_says_when_production_never_waited(client, finance_user) -> None:
    client.force_login(finance_user)
    page = client.get(reverse("billing:advisor")).content.decode()
    assert 'data-testid="production-wait-none"' in page


@pytest.mark.parametrize(
    ("persona", "shown"),
    [("platform_admin", True), ("lead", False), ("member", False), ("outsider", False), ("finance_user", False)],
)
def test_the_cluster_view_shows_the_advice_to_admins_only(client, waits, request, persona, shown) -> None:
    client.force_login(request.getfixturevalue(persona))
    response = client.get(reverse("cluster"))
    body = response.content.decode()
    assert response.status_code == 200
    assert ('data-testid="production-wait"' in body) is shown
    assert (SENTENCE in body) is shown
    assert "team nlp" not in body or shown  # a team's burst limit is named to admins only
    partial = client.get(reverse("cluster"), headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="production-wait"' not in partial  # the map's refresh does not carry it


def test_the_command_prints_the_sentences_and_json(waits) -> None:
    out = StringIO()
    call_command("procurement", "waits", stdout=out)
    assert out.getvalue().strip() == SENTENCE.replace("&#x27;", "'") + "."
    out = StringIO()
    call_command("procurement", "waits", "--json", "--purchase-unit", "1", "--days", "9", stdout=out)
    payload = json.loads(out.getvalue())
    assert [c["gpu_class"] for c in payload["classes"]] == ["H100", "A100"]
    assert payload["classes"][0]["held"]["reserve_gpus"] == 3 and payload["purchase_unit_gpus"] == 1
    with pytest.raises(CommandError, match="purchase unit must be 1 to 64"):
        call_command("procurement", "waits", "--purchase-unit", "0")


def test_the_command_says_when_production_never_waited(db) -> None:
    out = StringIO()
    call_command("procurement", "waits", stdout=out)
    assert out.getvalue().strip() == "Production did not wait for want of capacity or burst limit in the last week."
