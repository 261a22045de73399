"""The audit trail in the admin and its CSV: platform admins read and download it, with the list's filters;
nobody else does (the admin's sign-in for people without staff access, 403 for staff who are not platform
admins)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import AbstractBaseUser, Permission
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django.asserts import assertContains

from audit.exports import COLUMNS
from teams.models import Membership, Quota, Team
from tests.factories import NodeFactory, QuotaFactory, UserFactory
from tests.test_admin import _form_data

pytestmark = pytest.mark.django_db

LIST = reverse("admin:auditlog_logentry_changelist")
EXPORT = reverse("admin:auditlog_logentry_export")
ONE_DAY = timedelta(days=1)


@pytest.fixture
def changed(client: Client, platform_admin: AbstractBaseUser, team: Team) -> Quota:
    """A quota the platform admin changed from 8 to 4 guaranteed GPUs, and a node the scheduler cordoned."""
    quota = QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=Decimal(8), burst_gpus=Decimal(16))
    node = NodeFactory(name="gpu-node-7")
    node.state = "cordoned"
    node.save()
    client.force_login(platform_admin)
    url = reverse("admin:teams_quota_change", args=[quota.pk])
    assert client.post(url, {**_form_data(client.get(url)), "guaranteed_gpus": "4"}).status_code == 302
    client.logout()
    return quota


def _rows(response) -> list[dict[str, str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_a_platform_admin_reads_the_trail_with_before_and_after(client, platform_admin, changed) -> None:
    client.force_login(platform_admin)
    response = client.get(LIST)
    assertContains(response, "guaranteed_gpus: 8.000 → 4")
    assertContains(response, "Download CSV")
    entry = LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Quota)).latest("timestamp")
    detail = client.get(reverse("admin:auditlog_logentry_change", args=[entry.pk]))
    assert detail.status_code == 200
    # Read-only: no save button, and a post changes nothing.
    assert b'name="_save"' not in detail.content
    assert client.post(reverse("admin:auditlog_logentry_change", args=[entry.pk]), {}).status_code == 403


def test_the_list_filters_by_model_actor_and_date(client, platform_admin, changed) -> None:
    client.force_login(platform_admin)
    quota_type = ContentType.objects.get_for_model(Quota).pk
    by_model = client.get(LIST, {"resource_type": quota_type})
    assert {e.content_type_id for e in by_model.context["cl"].result_list} == {quota_type}
    by_actor = client.get(LIST, {"actor": platform_admin.pk})
    assert by_actor.context["cl"].result_list and all(
        e.actor_id == platform_admin.pk for e in by_actor.context["cl"].result_list
    )
    nobody = client.get(LIST, {"actor": "-"})
    assert any(e.object_repr == "gpu-node-7" for e in nobody.context["cl"].result_list)
    # The date filter's "Today" link, and a day long past.
    day = timezone.now().date()
    today = client.get(
        LIST, {"timestamp__gte": f"{day} 00:00:00+00:00", "timestamp__lt": f"{day + ONE_DAY} 00:00:00+00:00"}
    )
    assert len(today.context["cl"].result_list) == LogEntry.objects.count()
    long_ago = client.get(
        LIST, {"timestamp__gte": "2000-01-01 00:00:00+00:00", "timestamp__lt": "2000-01-02 00:00:00+00:00"}
    )
    assert list(long_ago.context["cl"].result_list) == []


def test_the_export_has_the_rows_and_follows_the_filters(client, platform_admin, changed) -> None:
    client.force_login(platform_admin)
    everything = _rows(client.get(EXPORT))
    assert list(everything[0]) == list(COLUMNS)
    quota_change = [r for r in everything if r["model"] == "teams.Quota" and r["action"] == "update"]
    assert quota_change == [
        {
            **quota_change[0],
            "actor": "dave",
            "via": "admin",
            "field": "guaranteed_gpus",
            "before": "8.000",
            "after": "4",
            "object_id": str(changed.pk),
        }
    ]
    cordon = next(r for r in everything if r["object"] == "gpu-node-7" and r["field"] == "state")
    assert (cordon["actor"], cordon["before"], cordon["after"]) == ("system", "ready", "cordoned")

    only_quotas = _rows(client.get(EXPORT, {"resource_type": ContentType.objects.get_for_model(Quota).pk}))
    assert only_quotas and {r["model"] for r in only_quotas} == {"teams.Quota"}
    only_dave = _rows(client.get(EXPORT, {"actor": platform_admin.pk}))
    assert only_dave and {r["actor"] for r in only_dave} == {"dave"}
    assert client.get(EXPORT, {"actor": "x"}).status_code == 400


def test_a_formula_in_a_name_is_written_as_text(client, platform_admin, team) -> None:
    Membership.objects.create(team=team, user=UserFactory(username="=cmd|calc"), role="member")
    client.force_login(platform_admin)
    rows = _rows(client.get(EXPORT, {"resource_type": ContentType.objects.get_for_model(Membership).pk}))
    assert any(r["after"] == "'=cmd|calc" for r in rows)


@pytest.mark.parametrize("who", ["lead", "member", "outsider", "finance_user"])
def test_people_without_admin_access_are_sent_to_the_admin_sign_in(client, request, who, changed) -> None:
    client.force_login(request.getfixturevalue(who))
    for url in (LIST, EXPORT):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response.url


def test_staff_who_are_not_platform_admins_are_refused(client, changed) -> None:
    staff = UserFactory(username="helpdesk", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_logentry", content_type__app_label="auditlog"))
    client.force_login(staff)
    assert client.get(LIST).status_code == 403
    assert client.get(EXPORT).status_code == 403
    assert b"Audit trail" not in client.get(reverse("admin:index")).content
