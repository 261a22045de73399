"""deploy/monitoring and deploy/grafana: the dashboard loads and every query, like every alert, names only metrics
that /metrics exports; the alert rules are complete; the monitoring kustomization lists its files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from portal.metrics.collector import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = ROOT / "deploy" / "grafana" / "microcosm.json"
METRIC = re.compile(r"\bmicrocosm_\w+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


@pytest.fixture
def exported(db) -> set[str]:
    """Every sample name the collector can produce, read from the collector itself (an empty database still
    declares every family)."""
    names = set()
    for family in REGISTRY.collect():
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


def _balanced(expr: str) -> bool:
    depth = 0
    for char in expr:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def test_the_dashboard_queries_name_only_exported_metrics(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    titles = {panel["title"] for panel in panels}
    for wanted in ("Cluster utilization", "Pending jobs by team", "Cycle time by phase (p95)", "Preemptions per hour"):
        assert wanted in titles
    named = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = set(METRIC.findall(target["expr"]))
            assert used and used <= exported, (panel["title"], used - exported)
            assert _balanced(target["expr"]), target["expr"]
            named |= used
    assert {"microcosm_gpus", "microcosm_mig_reconfigurations_total", "microcosm_spot_interruptions_total"} <= named


def test_every_alert_is_complete_and_names_only_exported_metrics(exported):
    rules = _rules()
    assert {rule["alert"] for rule in rules} == {
        "MicrocosmSchedulingLoopStalled",
        "MicrocosmProductionJobPending",
        "MicrocosmMigReconfigurationStuck",
        "MicrocosmLedgerLag",
        "MicrocosmGpusIdleWhileWorkPending",
    }
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        used = set(METRIC.findall(rule["expr"]))
        assert used and used <= exported, (rule["alert"], used - exported)
        assert _balanced(rule["expr"]), rule["alert"]


def test_the_service_monitor_scrapes_the_web_service_once_with_the_token():
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    web = list(yaml.safe_load_all((ROOT / "deploy" / "web.yaml").read_text()))
    service = next(doc for doc in web if doc["kind"] == "Service")
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    # The scrape goes through the web pods' nginx like any client (docs/deploy.md, "The front").
    (scraped,) = [port for port in service["spec"]["ports"] if port["name"] == endpoint["port"]]
    containers = next(doc for doc in web if doc["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
    proxy = next(c for c in containers if c["name"] == "proxy")
    assert scraped["targetPort"] in {port["name"] for port in proxy["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"] == {"name": "microcosm-secrets", "key": "METRICS_TOKEN"}
    address = next(r for r in endpoint["relabelings"] if r.get("targetLabel") == "__address__")
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert address["replacement"] == f"{host}:80"
    # As shipped, a scrape is answered: its Host is allowed and the Secret has the token it sends.
    settings_map = yaml.safe_load((ROOT / "deploy" / "settings.yaml").read_text())
    assert host in settings_map["data"]["ALLOWED_HOSTS"].split(",")
    secret = yaml.safe_load((ROOT / "deploy" / "secret.yaml").read_text())
    assert len(secret["stringData"]["METRICS_TOKEN"]) >= 32


def test_the_monitoring_kustomization_lists_its_files_and_the_default_one_does_not():
    listed = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in MONITORING.glob("*.yaml") if p.name != "kustomization.yaml")
    default = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())["resources"]
    assert not set(listed) & set(default)


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(
    PROMTOOL is None and not os.environ.get("CI"), reason="promtool (Debian's prometheus) is installed by .ci/run"
)
def test_promtool_accepts_the_alert_rules_and_every_dashboard_query(tmp_path: Path) -> None:
    """Prometheus's own checker parses every alert's PromQL, and every dashboard query written as a recording
    rule, so a query Prometheus would refuse fails here, not on the operator's dashboard."""
    assert PROMTOOL is not None, "CI installs Debian's prometheus package for promtool"
    doc = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(yaml.safe_dump(doc["spec"]))
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    # Grafana's interval variables are not PromQL: a fixed range stands in for them.
    recorded = [{"record": f"dashboard:query_{i}", "expr": re.sub(r"\$__\w+", "5m", e)} for i, e in enumerate(exprs)]
    queries = tmp_path / "queries.yaml"
    queries.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    checked = subprocess.run([PROMTOOL, "check", "rules", str(alerts), str(queries)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
