"""The Kubernetes backend's settings read from a mapping (scheduler/gateways/kube/settings.py): the defaults, and
junk refused with the message start-up shows (tests/portal/test_settings.py checks it through manage.py)."""

from __future__ import annotations

import re

import pytest

from scheduler.env import EnvError
from scheduler.gateways.kube.settings import kubernetes_settings


def test_an_empty_environment_gives_the_defaults() -> None:
    kube = kubernetes_settings({})
    assert kube["gpu_operator_namespace"] == "gpu-operator"
    assert kube["gke_networks"] == [f"vpc{n}" for n in range(1, 9)]
    assert kube["pod_security_team_levels"] == {}
    assert (kube["shm_fraction"], kube["rendezvous_port"], kube["cache_sync_timeout_s"]) == (0.5, 29500, 120)
    assert kube["node_requests"] is False  # no autoscaled pool: no LIST of node requests a cycle
    assert kube["dra"] is False  # no DRA driver: no watch of ResourceSlices
    assert kube["dra_fabric_class"] == "efa.networking.k8s.aws"  # EKS's aws-dranet chart's DeviceClass


def test_node_requests_are_observed_when_pools_can_grow() -> None:
    assert kubernetes_settings({"KUBE_NODE_REQUESTS": "1"})["node_requests"] is True


def test_resource_slices_are_read_on_a_dra_cluster() -> None:
    assert kubernetes_settings({"KUBE_DRA": "1"})["dra"] is True


def test_only_the_mapping_given_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_OPERATOR_NAMESPACE", "from-the-process")
    kube = kubernetes_settings(
        {"GPU_OPERATOR_NAMESPACE": "nvidia-gpu-operator", "KUBE_POD_SECURITY_TEAM_LEVELS": "nlp=privileged"}
    )
    assert kube["gpu_operator_namespace"] == "nvidia-gpu-operator"
    assert kube["pod_security_team_levels"] == {"nlp": "privileged"}


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"KUBE_SHM_FRACTION": "0"}, "KUBE_SHM_FRACTION=0.0 must be above 0 and at most 1"),
        ({"MIG_CONFIG_MAP": "Mig_Config"}, "MIG_CONFIG_MAP='Mig_Config' is not a Kubernetes name"),
        ({"KUBE_GKE_NETWORKS": "vpc1,vpc1"}, "KUBE_GKE_NETWORKS='vpc1,vpc1' names a network twice"),
        ({"KUBE_POD_SECURITY_TEAM_LEVELS": "nlp=root"}, "item 'nlp=root' is not team=level"),
        ({"KUBE_DRA_FABRIC_CLASS": "EFA class"}, "KUBE_DRA_FABRIC_CLASS='EFA class' is not a DeviceClass name"),
    ],
)
def test_junk_is_refused_with_the_start_up_message(environ: dict[str, str], message: str) -> None:
    with pytest.raises(EnvError, match=re.escape(message)):
        kubernetes_settings(environ)
