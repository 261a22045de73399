"""The fleet admin: MIG layouts written in NVIDIA's notation (empty: MIG off), checked against the catalog, refused
while a live allocation holds the GPU, and saved through the service; the node list shows state, GPUs free / used
and the layouts, with a query count that does not grow with the nodes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django.asserts import assertContains, assertNotContains

from scheduler.admin import NodeAdmin
from scheduler.models import Gpu, Node
from teams.models import Team
from tests.factories import AllocationFactory, GpuFactory, JobFactory, NodeFactory, TeamFactory
from tests.test_admin import _form_data, _form_errors, _url

pytestmark = pytest.mark.django_db

HALVES = [["3g.40gb", 0], ["3g.40gb", 4]]  # A100-SXM4-80GB, the factories' model


@pytest.fixture
def staff_client(client: Client, platform_admin: AbstractBaseUser) -> Client:
    client.force_login(platform_admin)
    return client


def _node_with_layouts(**kwargs: object) -> Node:
    node = NodeFactory(**kwargs)
    for index in range(node.gpu_count):
        GpuFactory(node=node, index=index, mig_layout=HALVES if index < 4 else [])
    return node


def _post_gpu(client: Client, gpu: Gpu, layout: str) -> object:
    url = _url(Gpu, "change", gpu.pk)
    data = _form_data(client.get(url))
    data["mig_layout"] = layout
    return client.post(url, data)


def _post_inline(client: Client, node: Node, layouts: dict[int, str]) -> object:
    url = _url(Node, "change", node.pk)
    data = _form_data(client.get(url))
    for index, layout in layouts.items():
        data[f"gpus-{index}-mig_layout"] = layout
    return client.post(url, data)


def _hold(node: Node, gpu_index: int, profile: str = "", start: int | None = None) -> None:
    AllocationFactory(
        job=JobFactory(
            team=Team.objects.filter(slug="vision").first() or TeamFactory(slug="vision"), name="resnet-serve"
        ),
        node=node,
        gpu_index=gpu_index,
        mig_profile=profile,
        mig_start=start,
    )


# --- an empty layout is MIG off -----------------------------------------------------------------------------


def test_clearing_a_layout_on_the_gpu_page_saves_mig_off(staff_client: Client) -> None:
    gpu = GpuFactory(node=NodeFactory(), index=0, mig_layout=HALVES)
    response = _post_gpu(staff_client, gpu, "")
    assert response.status_code == 302, _form_errors(response)
    gpu.refresh_from_db()
    assert gpu.mig_layout == []


def test_clearing_a_layout_on_the_node_page_saves_mig_off(staff_client: Client) -> None:
    node = _node_with_layouts()
    response = _post_inline(staff_client, node, {0: "  "})
    assert response.status_code == 302, _form_errors(response)
    assert node.gpus.get(index=0).mig_layout == []
    assert node.gpus.get(index=1).mig_layout == HALVES


def test_the_form_shows_and_takes_nvidia_notation(staff_client: Client) -> None:
    gpu = GpuFactory(node=NodeFactory(), index=0, mig_layout=HALVES)
    page = staff_client.get(_url(Gpu, "change", gpu.pk))
    assertContains(page, 'value="3g.40gb@0,3g.40gb@4"')
    assertNotContains(page, "[[&quot;3g.40gb&quot;")

    response = _post_gpu(staff_client, gpu, "3g.40gb@4, 2g.20gb@0 ,1g.10gb@2")
    assert response.status_code == 302, _form_errors(response)
    gpu.refresh_from_db()
    assert gpu.mig_layout == [["2g.20gb", 0], ["1g.10gb", 2], ["3g.40gb", 4]]  # stored sorted by start


# --- an invalid layout is a form error that says how to fix it ---------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("3g.40gb", "&#x27;3g.40gb&#x27; is not PROFILE@START, e.g. 3g.40gb@4"),
        ("3g.40gb@2", "3g.40gb cannot start at memory slice 2; allowed starts: 0, 4. Write PROFILE@START items"),
        ("3g.40gb@0,4g.40gb@0", "overlaps another instance at memory slice 0"),
        ("9g.90gb@0", "&#x27;9g.90gb&#x27; is not a MIG profile of A100-SXM4-80GB; use one of: 1g.10gb"),
        ('[["3g.40gb", 2]', "Not valid JSON: write the layout as PROFILE@START items instead."),
    ],
)
def test_an_invalid_layout_is_a_form_error(staff_client: Client, layout: str, message: str) -> None:
    node = _node_with_layouts()
    for response in (
        _post_gpu(staff_client, node.gpus.get(index=0), layout),
        _post_inline(staff_client, node, {0: layout}),
    ):
        assert response.status_code == 200
        assertContains(response, message)
    assert node.gpus.get(index=0).mig_layout == HALVES


# --- a layout a live allocation holds is not changed -------------------------------------------------------------


def test_a_held_gpus_reconfiguration_is_refused_naming_the_job(staff_client: Client) -> None:
    node = _node_with_layouts()
    _hold(node, 0, "3g.40gb", 4)
    held = node.gpus.get(index=0)
    job_id = held.node.allocations.get().job_id

    for response in (_post_gpu(staff_client, held, ""), _post_inline(staff_client, node, {0: "7g.80gb@0"})):
        assert response.status_code == 200
        assertContains(response, f"GPU 0 of {node.name} is in use: job {job_id} (resnet-serve, team vision)")
        assertContains(response, "holds MIG instance 3g.40gb@4")
        assertContains(response, "wait for the job to end or drain the node")
    assert node.gpus.get(index=0).mig_layout == HALVES

    # Another GPU of the same node is free to change, and saving the held one unchanged is no change.
    response = _post_inline(staff_client, node, {1: "", 0: "3g.40gb@4,3g.40gb@0"})
    assert response.status_code == 302, _form_errors(response)
    assert node.gpus.get(index=1).mig_layout == []


def test_a_whole_gpu_allocation_holds_it_and_an_ended_one_does_not(staff_client: Client) -> None:
    node = _node_with_layouts()
    _hold(node, 5)
    response = _post_gpu(staff_client, node.gpus.get(index=5), "7g.80gb@0")
    assertContains(response, "holds the whole GPU")

    node.allocations.update(ended_at=timezone.now())
    response = _post_gpu(staff_client, node.gpus.get(index=5), "7g.80gb@0")
    assert response.status_code == 302, _form_errors(response)
    assert node.gpus.get(index=5).mig_layout == [["7g.80gb", 0]]


def test_a_job_bound_between_the_check_and_the_save_keeps_its_gpu(
    staff_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form's check passes, then a cycle binds work on the GPU: the service refuses under its lock and the
    admin reads why instead of an eviction."""
    node = _node_with_layouts()
    monkeypatch.setattr("scheduler.admin.check_unheld", lambda gpu: _hold(gpu.node, gpu.index, "3g.40gb", 0))
    response = _post_gpu(staff_client, node.gpus.get(index=0), "")
    assert response.status_code == 302
    assertContains(staff_client.get(response.url), "MIG layout of")
    assert node.gpus.get(index=0).mig_layout == HALVES


# --- the lists ------------------------------------------------------------------------------------------------------


def test_node_list_shows_state_gpus_free_used_and_layouts(staff_client: Client) -> None:
    node = _node_with_layouts(name="a100-1", state="cordoned")
    _hold(node, 0, "3g.40gb", 0)
    _hold(node, 0, "3g.40gb", 4)
    _hold(node, 6)
    now = timezone.now()
    AllocationFactory(node=node, gpu_index=7, started_at=now, ended_at=now)  # ended: the GPU is free again

    response = staff_client.get(_url(Node, "changelist"))

    assertContains(response, '<td class="field-state">cordoned</td>', html=True)
    assertContains(response, '<td class="field-gpu_use">6 / 2 of 8</td>', html=True)
    assertContains(
        response,
        '<td class="field-mig_layouts"><div>GPU 0–3: 3g.40gb@0,<wbr>3g.40gb@4</div><div>GPU 4–7: MIG off</div></td>',
        html=True,
    )


def test_node_list_is_narrow_enough_for_1400_px() -> None:
    """The topology columns moved to the filters and the node page; the state is no longer the last of 13."""
    shown = NodeAdmin.list_display
    assert len(shown) <= 8 and shown.index("state") < 3
    assert not {"leaf_switch", "spine", "fabric", "fabric_devices", "placement_group", "interconnect"} & set(shown)
    assert {"leaf_switch", "spine", "fabric", "placement_group"} <= set(NodeAdmin.list_filter)


def test_node_list_queries_do_not_grow_with_nodes_gpus_and_allocations(staff_client: Client) -> None:
    url = _url(Node, "changelist")
    first = _node_with_layouts()
    _hold(first, 0, "3g.40gb", 0)
    staff_client.get(url)  # warm per-process caches (content types, session) out of the count
    with CaptureQueriesContext(connection) as one_node:
        staff_client.get(url)
    for _ in range(3):
        node = _node_with_layouts()
        _hold(node, 1, "3g.40gb", 4)
        _hold(node, 7)
    with CaptureQueriesContext(connection) as four_nodes:
        response = staff_client.get(url)
    assert len(four_nodes) == len(one_node), [q["sql"] for q in four_nodes.captured_queries]
    assertContains(response, '<td class="field-gpu_use">6 / 2 of 8</td>', count=3, html=True)


def test_gpu_list_shows_the_layout_in_nvidia_notation(staff_client: Client) -> None:
    node = _node_with_layouts()
    response = staff_client.get(_url(Gpu, "changelist"))
    assertContains(response, '<td class="field-layout">3g.40gb@0,3g.40gb@4</td>', count=4, html=True)
    assertContains(response, '<td class="field-layout">MIG off</td>', count=4, html=True)
    assert node.gpus.count() == 8
