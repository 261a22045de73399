"""Autoscaled pools: what clean() refuses and says, and the admin's pages for pools, requests and the budget."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from jobs.models import Job
from scheduler.autoscaled import (
    BEST_EFFORT_ATOMIC,
    QUEUED_PROVISIONING,
    AutoscaledPool,
    Autoscaler,
    NodeRequest,
    OnDemandBudget,
)
from scheduler.core import default_arrival_s
from scheduler.loop.provisioning import request_spec
from scheduler.models import GpuModel
from scheduler.services.fleet import gpu_models_sync, node_register
from teams.models import Team

pytestmark = pytest.mark.django_db
ASKED = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def _pool(**overrides: object) -> AutoscaledPool:
    gpu_models_sync()
    values: dict[str, object] = {
        "name": "h100-od",
        "autoscaler": Autoscaler.CLUSTER_AUTOSCALER,
        "node_selector": {"cloud.google.com/gke-nodepool": "h100-od"},
        "gpu_model": GpuModel.objects.get(name="H100-SXM5-80GB"),
        "gpus_per_node": 8,
        "max_nodes": 4,
    }
    values.update(overrides)
    return AutoscaledPool(**values)


def test_a_cluster_autoscaler_pool_defaults_to_the_atomic_class_and_is_valid() -> None:
    pool = _pool()
    pool.full_clean()
    assert pool.provisioning_class == BEST_EFFORT_ATOMIC
    assert pool.arrival_default_s == default_arrival_s("H100-SXM5-80GB")  # the documented one


def test_karpenter_takes_no_provisioning_class() -> None:
    with pytest.raises(ValidationError) as caught:
        _pool(autoscaler=Autoscaler.KARPENTER).full_clean()
    assert "Karpenter takes no ProvisioningRequest class" in str(caught.value.message_dict["provisioning_class"])
    _pool(autoscaler=Autoscaler.KARPENTER, provisioning_class="").full_clean()


def test_the_cluster_autoscaler_needs_a_class_and_node_labels() -> None:
    with pytest.raises(ValidationError) as caught:
        _pool(provisioning_class="", node_selector={}).full_clean()
    errors = caught.value.message_dict
    assert "needs a ProvisioningRequest class" in errors["provisioning_class"][0]
    assert "node labels" in errors["node_selector"][0]


def test_a_kubernetes_pool_is_picked_by_its_autoscalers_label_valued_with_its_name() -> None:
    """On Kubernetes a node's pool is the value of its autoscaler's label (scheduler.gateways.kube.provisioning
    pool_of): a pool named otherwise would never see its nodes arrive (tests/scheduler/gateways/kube/
    test_kube_peak.py)."""
    for selector in ({"microcosm.io/pool": "h100-od"}, {"karpenter.sh/nodepool": "p5-ondemand"}):
        with pytest.raises(ValidationError) as caught:
            _pool(autoscaler=Autoscaler.KARPENTER, provisioning_class="", node_selector=selector).full_clean()
        message = caught.value.message_dict["node_selector"][0]
        assert '{"karpenter.sh/nodepool": "h100-od"}' in message and "kubernetes.azure.com/agentpool" in message
    karpenter = {"karpenter.sh/nodepool": "h100-od"}
    _pool(autoscaler=Autoscaler.KARPENTER, provisioning_class="", node_selector=karpenter).full_clean()
    _pool(node_selector={"kubernetes.azure.com/agentpool": "h100-od", "nvidia.com/gpu.product": "H100"}).full_clean()


def test_node_labels_must_be_strings() -> None:
    with pytest.raises(ValidationError) as caught:
        _pool(node_selector={"pool": 3}).full_clean()
    assert "object of strings" in caught.value.message_dict["node_selector"][0]


def test_class_parameters_are_strings_within_the_apis_bounds_and_for_a_provisioning_request_only() -> None:
    pool = _pool(provisioning_class=QUEUED_PROVISIONING, provisioning_parameters={"maxRunDurationSeconds": "86400"})
    pool.full_clean()
    for parameters, words in (
        ({"maxRunDurationSeconds": 86400}, "object of strings"),
        ({"k": "x" * 256}, "at most 255 characters: k"),
        ({str(i): "1" for i in range(101)}, "at most 100 parameters"),
    ):
        with pytest.raises(ValidationError) as caught:
            _pool(provisioning_parameters=parameters).full_clean()
        assert words in caught.value.message_dict["provisioning_parameters"][0]
    karpenter = _pool(
        autoscaler=Autoscaler.KARPENTER,
        provisioning_class="",
        node_selector={"karpenter.sh/nodepool": "h100-od"},
        provisioning_parameters={"ValidUntilSeconds": "60"},
    )
    with pytest.raises(ValidationError) as caught:
        karpenter.full_clean()
    assert (
        "Only a ProvisioningRequest class takes parameters" in caught.value.message_dict["provisioning_parameters"][0]
    )


def test_a_requests_spec_carries_its_pools_class_and_parameters() -> None:
    pool = _pool(provisioning_class=QUEUED_PROVISIONING, provisioning_parameters={"maxRunDurationSeconds": "3600"})
    pool.save()
    team = Team.objects.create(name="NLP", slug="nlp", namespace="team-nlp")
    job = Job.objects.create(team=team, name="peak", kind="training", gpus=8, submitted_at=ASKED)
    row = NodeRequest.objects.create(
        job=job,
        pool=pool,
        nodes=1,
        gpus_per_node=8,
        gpu_hours=8,
        requested_at=ASKED,
        state_since=ASKED,
        arrives_at=ASKED,
    )
    spec = request_spec(row, namespace=team.namespace, price_per_gpu_hour=4.0)
    assert (spec.provisioning_class, dict(spec.provisioning_parameters)) == (
        QUEUED_PROVISIONING,
        {"maxRunDurationSeconds": "3600"},
    )


def test_a_simulated_pool_needs_no_labels_and_its_own_arrival_wins() -> None:
    pool = _pool(autoscaler=Autoscaler.SIMULATED, node_selector={}, arrival_s=120.0)
    pool.full_clean()
    assert pool.arrival_default_s == 120.0


def test_the_admin_lists_pools_requests_and_the_budget_and_requests_are_read_only() -> None:
    _pool().save()
    OnDemandBudget.objects.create(gpu_hours_per_day=100)
    admin = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    assert b"h100-od" in client.get("/admin/scheduler/autoscaledpool/").content
    assert client.get("/admin/scheduler/noderequest/").status_code == 200
    assert client.get("/admin/scheduler/noderequest/add/").status_code == 403
    assert client.get("/admin/scheduler/ondemandbudget/").status_code == 200
    assert client.get("/admin/scheduler/ondemandbudget/add/").status_code == 403  # one row only
    page = client.get("/admin/scheduler/autoscaledpool/add/")
    assert page.status_code == 200 and b"provisioning_class" in page.content


def test_a_teams_on_demand_budget_is_kept_on_its_admin_page() -> None:
    team = Team.objects.create(name="NLP", slug="nlp", namespace="team-nlp")
    admin = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    page = client.get(f"/admin/teams/team/{team.pk}/change/").content.decode()
    assert "On-demand budget" in page and 'name="on_demand_gpu_hours_per_day"' in page


def test_an_autoscaled_nodes_pool_request_and_release_are_read_only_in_the_node_admin() -> None:
    gpu_models_sync()
    node = node_register(
        name="od-1",
        gpu_model="A100-SXM4-80GB",
        gpu_count=8,
        interconnect="nvswitch",
        leaf_switch="",
        spine="",
        tier="on-demand",
        price_per_gpu_hour="3.43",
        pool="a100-od",
    )
    admin = User.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin)
    page = client.get(f"/admin/scheduler/node/{node.pk}/change/").content.decode()
    assert "a100-od" in page
    for field in ("pool", "node_request", "idle_since", "released_at"):
        assert f'name="{field}"' not in page
