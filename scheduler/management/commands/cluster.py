"""``manage.py cluster sync [--json]``: read the cluster through the configured gateway and make the
inventory match it (nodes, GPUs, MIG layouts, node states); print the nodes and GPUs seen."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.errors import GatewayError
from scheduler.gateways import gateway_get
from scheduler.services.sync import cluster_sync


class Command(BaseCommand):
    help = "Cluster operations: `cluster sync` reads the nodes the cluster reports into the inventory."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{sync}")
        sync = actions.add_parser("sync", help="Read the cluster's nodes into the inventory.")
        sync.add_argument("--json", action="store_true", help="Print the result as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            gateway = gateway_get()
            report = cluster_sync(observation=gateway.observe())
        except GatewayError as exc:
            raise CommandError(f"cannot read the cluster: {exc}") from exc
        data = {"backend": gateway.name, **report.as_json()}
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
            return
        gpus = sum(int(str(node["gpus"])) for node in report.nodes)
        self.stdout.write(f"{gateway.name}: {len(report.nodes)} nodes, {gpus} GPUs")
        for node in report.nodes:
            layouts = node["mig"]  # GPU index → MIG layout
            mig = f", MIG on GPUs {', '.join(layouts)}" if isinstance(layouts, dict) and layouts else ""
            self.stdout.write(
                f"  {node['name']}: {node['gpus']} × {node['gpu_model']} ({node['tier']}, {node['state']}{mig})"
            )
        for name in report.gone:
            self.stdout.write(f"  {name}: no longer reported, marked gone")
        for line in report.skipped:
            self.stderr.write(f"  skipped {line}")
