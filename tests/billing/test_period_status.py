"""A closed month says final on the page, in the downloads and in the API; a running one says provisional."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse
from django.utils import timezone

pytestmark = pytest.mark.django_db


def test_a_closed_month_is_final_everywhere(client, october, finance_user):
    client.force_login(finance_user)
    page = client.get(reverse("billing:reports"), {"month": "2026-10"}).content.decode()
    assert 'data-testid="period-status"' in page and ">final</span>" in page
    response = client.get(reverse("billing:download"), {"month": "2026-10", "file": "summary", "format": "csv"})
    assert {row["status"] for row in csv.DictReader(io.StringIO(response.content.decode()))} == {"final"}
    assert client.get(reverse("billing:api-chargeback"), {"month": "2026-10"}).json()["status"] == "final"


def test_the_running_month_is_provisional_everywhere(client, october, finance_user):
    client.force_login(finance_user)
    month = f"{timezone.now():%Y-%m}"
    page = client.get(reverse("billing:reports"), {"month": month}).content.decode()
    assert "provisional · in progress" in page and ">final</span>" not in page
    response = client.get(reverse("billing:download"), {"month": month, "file": "jobs", "format": "csv"})
    assert {row["status"] for row in csv.DictReader(io.StringIO(response.content.decode()))} == {"provisional"}
    assert client.get(reverse("billing:api-chargeback"), {"month": month}).json()["status"] == "provisional"
