"""A node's GPU count in the admin: the form says which GPUs a change creates or removes and applies it only once
confirmed, the GPU rows follow the count, and a GPU a live allocation holds is never removed."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from pytest_django.asserts import assertContains, assertNotContains

from scheduler.errors import InventoryError
from scheduler.gpu_count import gpu_count_change_summary, node_set_gpu_count
from scheduler.models import Node
from tests.factories import AllocationFactory, GpuFactory, NodeFactory
from tests.test_admin import _form_data, _form_errors, _url

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client, platform_admin: AbstractBaseUser) -> Client:
    client.force_login(platform_admin)
    return client


def _node(gpus: int) -> Node:
    node = NodeFactory(gpu_count=gpus)
    GpuFactory(node=node, index=0, mig_layout=[["3g.40gb", 0], ["3g.40gb", 4]])
    for index in range(1, gpus):
        GpuFactory(node=node, index=index)
    return node


def _indices(node: Node) -> list[int]:
    return sorted(node.gpus.values_list("index", flat=True))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (4, 16, "n goes from 4 to 16 GPUs: this creates GPUs 4–15 (12 GPUs, MIG off)"),
        (4, 5, "n goes from 4 to 5 GPUs: this creates GPU 4 (1 GPU, MIG off)"),
        (8, 4, "n goes from 8 to 4 GPUs: this removes GPUs 4–7 (4 GPUs, with their MIG layouts)"),
        (2, 1, "n goes from 2 to 1 GPUs: this removes GPU 1 (1 GPU, with their MIG layouts)"),
    ],
)
def test_summary_names_the_gpus(old: int, new: int, expected: str) -> None:
    assert gpu_count_change_summary(name="n", old=old, new=new) == expected


def test_growing_asks_for_confirmation_first(staff_client: Client) -> None:
    node = _node(4)
    url = _url(Node, "change", node.pk)
    data = _form_data(staff_client.get(url))
    data["gpu_count"] = 16

    response = staff_client.post(url, data)

    assertContains(response, "this creates GPUs 4–15 (12 GPUs, MIG off)")
    assertContains(response, "Confirm the GPU count change")
    node.refresh_from_db()
    assert node.gpu_count == 4
    assert _indices(node) == [0, 1, 2, 3]

    data["confirm_gpu_count"] = "on"
    response = staff_client.post(url, data, follow=True)

    assertContains(response, "this creates GPUs 4–15 (12 GPUs, MIG off): done.")
    node.refresh_from_db()
    assert node.gpu_count == 16
    assert _indices(node) == list(range(16))
    assert node.gpus.get(index=0).mig_layout == [["3g.40gb", 0], ["3g.40gb", 4]]
    assert node.gpus.get(index=15).mig_layout == []


def test_shrinking_removes_the_gpus_above_once_confirmed(staff_client: Client) -> None:
    node = _node(8)
    url = _url(Node, "change", node.pk)
    data = _form_data(staff_client.get(url))
    data["gpu_count"] = 4

    assertContains(staff_client.post(url, data), "this removes GPUs 4–7 (4 GPUs, with their MIG layouts)")
    assert _indices(node) == list(range(8))

    data["confirm_gpu_count"] = "on"
    response = staff_client.post(url, data)

    assert response.status_code == 302, _form_errors(response)
    node.refresh_from_db()
    assert node.gpu_count == 4
    assert _indices(node) == [0, 1, 2, 3]


def test_shrinking_below_a_held_gpu_is_refused_with_the_services_message(staff_client: Client) -> None:
    node = _node(8)
    AllocationFactory(node=node, gpu_index=6)
    url = _url(Node, "change", node.pk)
    data = _form_data(staff_client.get(url))
    data.update(gpu_count=4, confirm_gpu_count="on")

    response = staff_client.post(url, data)

    assertContains(response, f"{node.name} cannot shrink to 4 GPUs: GPU 6 is held by a running allocation")
    node.refresh_from_db()
    assert node.gpu_count == 8
    assert _indices(node) == list(range(8))


def test_an_unchanged_count_needs_no_confirmation(staff_client: Client) -> None:
    node = _node(4)
    url = _url(Node, "change", node.pk)
    data = _form_data(staff_client.get(url))
    data["zone"] = "zone-b"

    response = staff_client.post(url, data)

    assert response.status_code == 302, _form_errors(response)
    node.refresh_from_db()
    assert (node.zone, node.gpu_count, _indices(node)) == ("zone-b", 4, [0, 1, 2, 3])


def test_a_node_added_in_the_admin_gets_its_gpu_rows(staff_client: Client) -> None:
    template = NodeFactory.build(name="gpu-new-01")
    data = {
        "name": "gpu-new-01",
        "gpu_model": NodeFactory().gpu_model.pk,
        "gpu_count": 3,
        "interconnect": template.interconnect,
        "leaf_switch": "leaf-1",
        "spine": "spine-1",
        "tier": template.tier,
        "price_per_gpu_hour": "2.5",
        "zone": "zone-a",
        "labels": "{}",
        "fabric": "tcp",
        "fabric_devices": 0,
        "state": "ready",
        "_save": "Save",
    }
    add_page = staff_client.get(_url(Node, "add"))
    assertNotContains(add_page, 'name="confirm_gpu_count"')  # nothing to confirm for a new node
    response = staff_client.post(_url(Node, "add"), data)

    assert response.status_code == 302, _form_errors(response)
    assert _indices(Node.objects.get(name="gpu-new-01")) == [0, 1, 2]


def test_node_set_gpu_count_refuses_out_of_range_and_held_gpus() -> None:
    node = _node(2)
    AllocationFactory(node=node, gpu_index=1)
    with pytest.raises(InventoryError, match="from 1 to 16"):
        node_set_gpu_count(node=node, gpu_count=17)
    with pytest.raises(InventoryError, match="GPU 1 is held by a running allocation"):
        node_set_gpu_count(node=node, gpu_count=1)
    assert _indices(node) == [0, 1]
