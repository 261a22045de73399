"""Settings load from the environment: production settings pass `check --deploy`, junk stops start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.gateways.kube.fabrics import FabricSettings

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "k8Zq3vN0pL4xR7tY1wE9sA2dF6gH5jK0lM3nB8vC4xZ7qW1eR9tY2uI6oP5aS3dF",
    "ALLOWED_HOSTS": "microcosm.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://microcosm.example.com",
    "DATABASE_URL": "sqlite:////tmp/microcosm-check-deploy.sqlite3",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A fresh interpreter: settings are read once at import, so each environment needs its own process.
    inherited = {"DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    clean = {k: v for k, v in os.environ.items() if k not in inherited}
    clean.update(env)
    clean["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_settings() -> None:
    result = _manage("check", "--deploy", "--fail-level", "DEBUG", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout


def test_debug_off_without_secret_key_stops_with_advice() -> None:
    env = {**PRODUCTION_ENV, "SECRET_KEY": ""}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set to at least 50 random characters when DEBUG is off" in result.stderr


def test_short_secret_key_is_refused() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "SECRET_KEY": "too-short"})
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.parametrize(
    ("variable", "junk", "message"),
    [
        ("DEBUG", "perhaps", "DEBUG='perhaps' is not a boolean"),
        ("DATABASE_URL", "oracle://x/y", "is not a supported database URL"),
        ("REDIS_URL", "localhost:6379", "is not a Redis URL"),
        ("CLUSTER_BACKEND", "slurm", "CLUSTER_BACKEND='slurm' is not one of: simulated, kubernetes"),
        ("SCHEDULER_CYCLE_S", "0", "SCHEDULER_CYCLE_S=0 is below the minimum 1"),
        ("ALLOWED_HOSTS", "a,,b", "has an empty item"),
        ("CSRF_TRUSTED_ORIGINS", "microcosm.example.com", "must start with http:// or https://"),
        ("KUBE_CHECKPOINT_STORAGE_CLASS", "EFS_SC", "KUBE_CHECKPOINT_STORAGE_CLASS='EFS_SC' is not a storage class"),
        ("KUBE_CHECKPOINT_SIZE", "lots", "KUBE_CHECKPOINT_SIZE='lots' is not a storage size"),
        ("KUBE_CHECKPOINT_SIZE", "0Gi", "KUBE_CHECKPOINT_SIZE='0Gi' is not a storage size"),
        ("KUBE_REPORT_URL", "microcosm.example.com", "KUBE_REPORT_URL='microcosm.example.com' must start with http"),
        ("KUBE_CHECKPOINT_ROOT", "mnt/checkpoints", "KUBE_CHECKPOINT_ROOT='mnt/checkpoints' must be an absolute path"),
        ("KUBE_RDMA_RESOURCE", "rdma", "KUBE_RDMA_RESOURCE='rdma' is not an RDMA extended resource name"),
        ("KUBE_RDMA_RESOURCE", "vpc.amazonaws.com/efa", "is not an RDMA extended resource name"),
        ("KUBE_PLACEMENT_GROUP_LABEL", "placement group", "KUBE_PLACEMENT_GROUP_LABEL='placement group' is not a node"),
        ("KUBE_NCCL_IB_HCA", "mlx5_0, mlx5_1", "KUBE_NCCL_IB_HCA='mlx5_0, mlx5_1' is not an NCCL_IB_HCA value"),
        ("KUBE_TCPX_DAEMON_IMAGE", "https://registry/x:1", "KUBE_TCPX_DAEMON_IMAGE='https://registry/x:1' is not a"),
        ("KUBE_TCPXO_DAEMON_IMAGE", "an image", "KUBE_TCPXO_DAEMON_IMAGE='an image' is not a container image"),
        ("KUBE_GKE_NETWORKS", "vpc1,VPC2", "KUBE_GKE_NETWORKS item 'VPC2' is not a GKE network name"),
        ("KUBE_GKE_NETWORKS", "default,vpc1", "KUBE_GKE_NETWORKS item 'default' is not a GKE network name"),
        ("KUBE_GKE_NETWORKS", "vpc1,vpc1", "names a network twice"),
        ("KUBE_SHM_FRACTION", "0", "KUBE_SHM_FRACTION=0.0 must be above 0 and at most 1"),
        ("KUBE_SHM_FRACTION", "1.5", "KUBE_SHM_FRACTION=1.5 is above the maximum 1.0"),
        ("KUBE_SHM_FRACTION", "half", "KUBE_SHM_FRACTION='half' is not a number"),
        ("KUBE_RENDEZVOUS_PORT", "70000", "KUBE_RENDEZVOUS_PORT=70000 is above the maximum 65535"),
        ("KUBE_NAMESPACE_CREATE", "sometimes", "KUBE_NAMESPACE_CREATE='sometimes' is not a boolean"),
        ("KUBE_POD_SECURITY_LEVEL", "strict", "KUBE_POD_SECURITY_LEVEL='strict' is not one of: privileged, baseline"),
        ("KUBE_POD_SECURITY_TEAM_LEVELS", "nlp:privileged", "item 'nlp:privileged' is not team=level"),
        ("KUBE_POD_SECURITY_TEAM_LEVELS", "nlp=root", "item 'nlp=root' is not team=level"),
    ],
)
def test_junk_settings_stop_start_up_with_a_clear_message(variable: str, junk: str, message: str) -> None:
    result = _manage("check", env={**PRODUCTION_ENV, variable: junk})
    assert result.returncode != 0
    assert message in result.stderr


def test_debug_defaults_to_off() -> None:
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DEBUG"}
    result = _manage("shell", "-c", "from django.conf import settings; print(settings.DEBUG)", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_kept_database_connections_are_health_checked() -> None:
    # Connections live 60 s on PostgreSQL; one dropped meanwhile (restart, failover) is replaced, not served.
    env = {**PRODUCTION_ENV, "DATABASE_URL": "postgres://microcosm@db.example.com:5432/microcosm"}
    probe = (
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])"
    )
    result = _manage("shell", "-c", probe, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "60 True"


def test_postgresql_connections_do_not_jit_compile() -> None:
    # The portal's queries are short: compiling them cost more than running them (portal/settings.py).
    env = {**PRODUCTION_ENV, "DATABASE_URL": "postgres://microcosm@db.example.com:5432/microcosm"}
    probe = "from django.conf import settings; print(settings.DATABASES['default']['OPTIONS']['options'])"
    result = _manage("shell", "-c", probe, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "-c jit=off"
    sqlite = _manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.DATABASES['default'].get('OPTIONS'))",
        env=PRODUCTION_ENV,
    )
    # SQLite has options of its own (tests/portal/test_sqlite_busy.py), never PostgreSQL's.
    assert "jit" not in sqlite.stdout.strip().splitlines()[-1], sqlite.stderr


@pytest.mark.django_db
def test_the_test_database_connection_has_jit_off() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("JIT is PostgreSQL's: run with DATABASE_URL=postgres://...")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("off",)


def test_the_test_settings_health_check_connections_too() -> None:
    from django.conf import settings

    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


def test_the_fabric_settings_reach_the_kubernetes_gateway() -> None:
    env = {
        **PRODUCTION_ENV,
        "KUBE_RDMA_RESOURCE": "rdma/rdma_shared_device_a",
        "KUBE_PLACEMENT_GROUP_LABEL": "eks.amazonaws.com/nodegroup",
        "KUBE_NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "KUBE_TCPX_DAEMON_IMAGE": "registry.example/tcpx-rxdm:2",
        "KUBE_TCPXO_DAEMON_IMAGE": "registry.example/tcpxo-rxdm@sha256:0123",
        "KUBE_GKE_NETWORKS": "gpu-a,gpu-b,gpu-c,gpu-d",
    }
    script = "from scheduler.gateways.kube.gateway import fabric_settings_from_settings as f; print(f())"
    result = _manage("shell", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        "FabricSettings(rdma_resource='rdma/rdma_shared_device_a', "
        "placement_group_label='eks.amazonaws.com/nodegroup', nccl_ib_hca='=mlx5_0:1,mlx5_1:1', "
        "tcpx_daemon_image='registry.example/tcpx-rxdm:2', "
        "tcpxo_daemon_image='registry.example/tcpxo-rxdm@sha256:0123', "
        "gke_networks=('gpu-a', 'gpu-b', 'gpu-c', 'gpu-d'))"
    )


def test_the_team_namespace_settings_reach_the_kubernetes_gateway() -> None:
    env = {**PRODUCTION_ENV, "KUBE_NAMESPACE_CREATE": "1", "KUBE_POD_SECURITY_TEAM_LEVELS": "nlp=privileged"}
    script = (
        "from scheduler.gateways.kube.gateway import gateway_from_settings as g; "
        "from kubernetes import client; import unittest.mock as m; "
        "m.patch('scheduler.gateways.kube.client._api_client_from_environment', client.ApiClient).start(); "
        "k = g(); print(k.namespace_create, k.pod_security_level, k.pod_security_team_levels)"
    )
    result = _manage("shell", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "True baseline {'nlp': 'privileged'}"


def test_the_dra_settings_reach_the_kubernetes_gateway_and_its_claims() -> None:
    env = {**PRODUCTION_ENV, "KUBE_DRA": "1", "KUBE_DRA_FABRIC_CLASS": "rdma.example.com"}
    script = (
        "from scheduler.gateways.kube.gateway import gateway_from_settings as g; "
        "from kubernetes import client; import unittest.mock as m; "
        "m.patch('scheduler.gateways.kube.client._api_client_from_environment', client.ApiClient).start(); "
        "k = g(); print(k.dra, k.claims.fabric_class, k.claims.lookup == k.dra_nodes)"
    )
    result = _manage("shell", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    # The claims look the DRA nodes up in what the gateway's own observe read: no second reading of the slices.
    assert result.stdout.strip().splitlines()[-1] == "True rdma.example.com True"


def test_without_fabric_settings_only_efa_and_gke_machine_types_are_read() -> None:
    script = "from scheduler.gateways.kube.gateway import fabric_settings_from_settings as f; print(f())"
    result = _manage("shell", "-c", script, env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == repr(FabricSettings())


_SSO_ENV = {"OIDC_CLIENT_ID": "microcosm", "OIDC_CLIENT_SECRET": "s3cret"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({**_SSO_ENV, "OIDC_ISSUER": "http://idp.example.com"}, "must be an https:// URL"),
        ({"OIDC_ISSUER": "https://idp.example.com"}, "OIDC_CLIENT_ID and OIDC_CLIENT_SECRET must be set"),
        ({**_SSO_ENV, "OIDC_ISSUER": "https://idp.example.com", "OIDC_SCOPES": "email,groups"}, "must include openid"),
        ({**_SSO_ENV, "OIDC_ISSUER": "https://idp.example.com", "OIDC_SIGN_ALGO": "HS256"}, "is not one of"),
    ],
)
def test_single_sign_on_settings_are_checked_at_start_up(env: dict[str, str], message: str) -> None:
    result = _manage("check", env={**PRODUCTION_ENV, **env})
    assert result.returncode != 0
    assert message in result.stderr


def test_single_sign_on_settings_pass_check_deploy() -> None:
    env = {**PRODUCTION_ENV, **_SSO_ENV, "OIDC_ISSUER": "https://idp.example.com/realms/acme/"}
    result = _manage("check", "--deploy", "--fail-level", "DEBUG", env=env)
    assert result.returncode == 0, result.stderr + result.stdout
