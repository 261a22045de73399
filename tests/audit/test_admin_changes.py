"""Every change the admin makes to quotas, prices, commitments, memberships, roles, node state and team settings
is in the audit trail: who (the signed-in admin), when, and each field before → after. Job changes are not:
they are job events."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import AbstractBaseUser, Group, User
from django.test import Client

from billing.models import GpuPrice, ReservedCommitment
from scheduler.models import Gpu, Node
from teams.models import Membership, Quota, Team
from teams.roles import FINANCE
from tests.audit.helpers import changes, entries_for, last_entry, who
from tests.factories import (
    GpuFactory,
    GpuModelFactory,
    JobFactory,
    MembershipFactory,
    NodeFactory,
    QuotaFactory,
    UserFactory,
)
from tests.test_admin import _form_data, _form_errors, _url

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client, platform_admin: AbstractBaseUser) -> Client:
    client.force_login(platform_admin)
    return client


def _save(client: Client, url: str, **changed: object) -> None:
    data = {**_form_data(client.get(url)), **changed}
    response = client.post(url, data)
    assert response.status_code == 302, _form_errors(response)


def test_a_quota_change_records_the_admin_and_before_after(staff_client: Client, team: Team) -> None:
    quota = QuotaFactory(team=team, gpu_class="any", guaranteed_gpus=Decimal(8), burst_gpus=Decimal(16))
    _save(staff_client, _url(Quota, "change", quota.pk), guaranteed_gpus="4", burst_gpus="12")
    entry = last_entry(quota)
    assert entry.action == LogEntry.Action.UPDATE
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {"guaranteed_gpus": ("8.000", "4"), "burst_gpus": ("16.000", "12")}
    assert entry.timestamp is not None and entry.remote_addr == "127.0.0.1"


def test_a_quota_deleted_in_the_admin_keeps_its_last_values(staff_client: Client, team: Team) -> None:
    quota = QuotaFactory(team=team, gpu_class="H100", guaranteed_gpus=Decimal(2), burst_gpus=Decimal(4))
    response = staff_client.post(_url(Quota, "delete", quota.pk), {"post": "yes"})
    assert response.status_code == 302
    entry = last_entry(quota)
    assert entry.action == LogEntry.Action.DELETE and who(entry) == ("dave", "admin")
    assert changes(entry)["guaranteed_gpus"] == ("2.000", "")


def test_a_price_row_added_then_changed(staff_client: Client) -> None:
    model = GpuModelFactory()
    response = staff_client.post(
        _url(GpuPrice, "add"),
        {
            "gpu_model": model.pk,
            "tier": "on-demand",
            "price_per_gpu_hour": "3.5000",
            "effective_from": "2026-12-01",
            "source": "list price",
            "_save": "Save",
        },
    )
    assert response.status_code == 302, _form_errors(response)
    price = GpuPrice.objects.get(gpu_model=model)
    created = last_entry(price)
    assert created.action == LogEntry.Action.CREATE and who(created) == ("dave", "admin")
    assert changes(created)["price_per_gpu_hour"] == ("", "3.5000")

    _save(staff_client, _url(GpuPrice, "change", price.pk), price_per_gpu_hour="2.9000")
    assert changes(last_entry(price)) == {"price_per_gpu_hour": ("3.5000", "2.9000")}


def test_a_node_price_change(staff_client: Client) -> None:
    node = NodeFactory(price_per_gpu_hour=Decimal("2.0000"))
    _save(staff_client, _url(Node, "change", node.pk), price_per_gpu_hour="2.5000")
    entry = last_entry(node)
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {"price_per_gpu_hour": ("2.0000", "2.5000")}


def test_a_node_gpu_count_change_confirmed_in_the_admin(staff_client: Client) -> None:
    node = NodeFactory(gpu_count=4)
    _save(staff_client, _url(Node, "change", node.pk), gpu_count="8", confirm_gpu_count="on")
    entry = last_entry(node)
    assert who(entry) == ("dave", "admin")
    assert changes(entry)["gpu_count"] == ("4", "8")


def test_a_commitment_change(staff_client: Client) -> None:
    commitment = ReservedCommitment.objects.create(
        name="h100-2026",
        gpu_model=GpuModelFactory(),
        gpu_count=8,
        term_months=12,
        monthly_price=Decimal("20000.00"),
        start=date(2026, 1, 1),
    )
    _save(staff_client, _url(ReservedCommitment, "change", commitment.pk), gpu_count="16")
    entry = last_entry(commitment)
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {"gpu_count": ("8", "16")}


def test_a_membership_added_and_its_role_changed(staff_client: Client, team: Team) -> None:
    person = UserFactory(username="erin")
    response = staff_client.post(
        _url(Membership, "add"), {"user": person.pk, "team": team.pk, "role": "member", "_save": "Save"}
    )
    assert response.status_code == 302, _form_errors(response)
    membership = Membership.objects.get(user=person, team=team)
    created = last_entry(membership)
    assert created.action == LogEntry.Action.CREATE and who(created) == ("dave", "admin")
    assert changes(created)["user"] == ("", "erin") and changes(created)["role"] == ("", "member")

    _save(staff_client, _url(Membership, "change", membership.pk), role="lead")
    assert changes(last_entry(membership)) == {"role": ("member", "lead")}


def test_an_org_role_given_on_the_user_page(staff_client: Client) -> None:
    person = UserFactory(username="frank")
    finance = Group.objects.get_or_create(name=FINANCE)[0]
    _save(staff_client, _url(User, "change", person.pk), groups=[finance.pk])
    entry = last_entry(person)
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {"groups": ("", FINANCE)}


def test_cordon_and_drain(staff_client: Client) -> None:
    node = NodeFactory()
    response = staff_client.post(_url(Node, "changelist"), {"action": "cordon_nodes", "_selected_action": [node.pk]})
    assert response.status_code == 302
    cordoned = last_entry(node)
    assert who(cordoned) == ("dave", "admin")
    assert changes(cordoned) == {
        "state": ("ready", "cordoned"),
        "state_source": ("cluster", "admin"),
        "state_reason": ("", "by dave"),
    }

    _save(staff_client, _url(Node, "change", node.pk), state="draining", state_note="PSU swap")
    drained = last_entry(node)
    assert who(drained) == ("dave", "admin")
    assert changes(drained) == {"state": ("cordoned", "draining"), "state_reason": ("by dave", "by dave: PSU swap")}


def test_a_team_setting_change(staff_client: Client, team: Team) -> None:
    _save(staff_client, _url(Team, "change", team.pk), weight="3")
    entry = last_entry(team)
    assert who(entry) == ("dave", "admin") and changes(entry) == {"weight": ("1", "3")}


def test_a_priority_grant_in_the_admin_is_audited(staff_client: Client, team: Team) -> None:
    assert (team.max_priority, team.production_kinds) == ("high", ["inference"])  # not granted by default
    _save(
        staff_client,
        _url(Team, "change", team.pk),
        max_priority="production",
        production_kinds=["training", "inference"],
    )
    entry = last_entry(team)
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {
        "max_priority": ("high", "production"),
        "production_kinds": ('["inference"]', '["training", "inference"]'),
    }
    team.refresh_from_db()
    assert (team.max_priority, team.production_kinds) == ("production", ["training", "inference"])


def test_the_admin_refuses_a_grant_of_production_to_no_kind(staff_client: Client, team: Team) -> None:
    data = {**_form_data(staff_client.get(_url(Team, "change", team.pk))), "max_priority": "production"}
    data.pop("production_kinds")
    response = staff_client.post(_url(Team, "change", team.pk), data)
    assert response.status_code == 200 and "production_kinds" in response.context["adminform"].form.errors


def test_saving_without_a_change_records_nothing(staff_client: Client, team: Team) -> None:
    quota = QuotaFactory(team=team)
    before = len(entries_for(quota))
    _save(staff_client, _url(Quota, "change", quota.pk))
    assert len(entries_for(quota)) == before


def test_jobs_are_left_to_their_job_events(team: Team) -> None:
    job = JobFactory(team=team)
    job.priority = "production"
    job.save()
    assert entries_for(job) == []


def test_a_write_outside_a_request_names_the_system(team: Team) -> None:
    membership = MembershipFactory(team=team)
    membership.role = "lead"
    membership.save()
    assert who(last_entry(membership)) == ("system", "")


def test_a_gpu_reconfiguration_on_the_gpu_page_and_the_node_page(staff_client: Client) -> None:
    node = NodeFactory()
    gpus = [GpuFactory(node=node, index=i, mig_layout=[["3g.40gb", 0], ["3g.40gb", 4]]) for i in range(2)]
    _save(staff_client, _url(Gpu, "change", gpus[0].pk), mig_layout="7g.80gb@0")
    entry = last_entry(gpus[0])
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {
        "mig_layout": ('[["3g.40gb", 0], ["3g.40gb", 4]]', '[["7g.80gb", 0]]'),
    }

    _save(staff_client, _url(Node, "change", node.pk), **{"gpus-1-mig_layout": ""})
    entry = last_entry(gpus[1])
    assert who(entry) == ("dave", "admin")
    assert changes(entry) == {"mig_layout": ('[["3g.40gb", 0], ["3g.40gb", 4]]', "[]")}
