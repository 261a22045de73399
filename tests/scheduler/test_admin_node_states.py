"""The admin's node states: the list action and the change form both drain, with a reason; ``gone`` is not the
admin's to set; a view-only admin changes nothing (scheduler.admin, scheduler.node_states)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from scheduler.models import Node
from tests.factories import NodeFactory, UserFactory
from tests.test_admin import _form_data, _form_errors, _url

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client, platform_admin) -> Client:
    client.force_login(platform_admin)
    return client


def test_the_list_action_drains_and_says_what_happens_next(staff_client: Client) -> None:
    nodes = [NodeFactory(), NodeFactory()]
    response = staff_client.post(
        _url(Node, "changelist"),
        {"action": "drain_nodes", "_selected_action": [n.pk for n in nodes]},
        follow=True,
    )
    assert "Draining 2 node(s)" in response.content.decode()
    assert "stay drained until you mark them ready" in response.content.decode()
    for node in nodes:
        node.refresh_from_db()
        assert (node.state, node.state_source) == ("draining", "admin")
        assert node.state_reason.startswith("by ")

    staff_client.post(_url(Node, "changelist"), {"action": "mark_nodes_ready", "_selected_action": [nodes[0].pk]})
    nodes[0].refresh_from_db()
    assert (nodes[0].state, nodes[0].state_reason) == ("ready", "")


def test_the_change_form_drains_with_a_reason(staff_client: Client) -> None:
    node = NodeFactory()
    url = _url(Node, "change", node.pk)
    page = staff_client.get(url).content.decode()
    assert "requeued at the head of their priority" in page  # the form says what draining means
    response = staff_client.post(
        url, {**_form_data(staff_client.get(url)), "state": "draining", "state_note": "NVLink"}
    )
    assert response.status_code == 302, _form_errors(response)
    node.refresh_from_db()
    assert (node.state, node.state_source) == ("draining", "admin")
    assert node.state_reason.endswith(": NVLink")
    assert node.state_changed_at is not None


def test_gone_is_not_the_admins_to_set(staff_client: Client) -> None:
    node = NodeFactory()
    url = _url(Node, "change", node.pk)
    response = staff_client.post(url, {**_form_data(staff_client.get(url)), "state": "gone"})
    assert response.status_code == 200
    assert "state" in response.context["adminform"].form.errors
    node.refresh_from_db()
    assert node.state == "ready"


def test_a_view_only_admin_cannot_drain(client: Client) -> None:
    viewer = UserFactory(username="viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_node"))
    client.force_login(viewer)
    node = NodeFactory()
    response = client.post(_url(Node, "changelist"), {"action": "drain_nodes", "_selected_action": [node.pk]})
    assert response.status_code in (200, 302, 403)
    node.refresh_from_db()
    assert node.state == "ready"
