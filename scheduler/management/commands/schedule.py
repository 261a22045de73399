"""``manage.py schedule --once [--json]``: run one scheduling cycle now, under the single-flight lock, and
print its decisions. Exits non-zero, with one line saying why, when another cycle holds the lock or Redis, the
database or the cluster cannot be reached (one try: retrying is ``scheduler run``'s job)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.bridge.outage import OUTAGE_ERRORS, outage_of
from scheduler.errors import FencingError, GatewayError
from scheduler.loop.cycle import CycleReport, cycle_run
from scheduler.loop.locks import single_flight


class Command(BaseCommand):
    help = "Run one scheduling cycle (--once) and print its decisions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", required=True, help="Run exactly one cycle.")
        parser.add_argument("--json", action="store_true", help="Print the cycle's report as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = self._once()
        except OUTAGE_ERRORS as exc:  # the lock or the database: a message, not a traceback
            outage = outage_of(exc)
            if outage is None:
                raise
            raise CommandError(f"the cycle did not run: {outage.describe(exc)}") from exc
        if options["json"]:
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        else:
            self.stdout.write(report_text(report))

    def _once(self) -> CycleReport:
        with single_flight() as lease:
            if lease is None:
                raise CommandError("another scheduling cycle holds the lock; try again in a few seconds")
            try:
                return cycle_run(fence_token=lease.token, lease=lease)
            except (GatewayError, FencingError) as exc:
                raise CommandError(f"the cycle did not run: {exc}") from exc


def report_text(report: CycleReport) -> str:
    """A cycle's report in a few readable lines."""
    decisions = report.decisions
    lines = [
        f"cycle at {report.at}: {report.nodes} nodes, {report.pending} pending, {report.running} running "
        f"({report.total_ms:.0f} ms, planning {report.plan_ms:.0f} ms)"
    ]
    for kind, items in sorted(report.repairs.items()):
        if items:
            lines.append(f"  repaired ({kind}): jobs {', '.join(items)}")
    for bind in decisions.get("binds", []):
        where = "; ".join(
            ", ".join(
                f"{s['node']}/{s['gpu']}" + (f" {s['mig_profile']}@{s['mig_start']}" if s["mig_profile"] else "")
                for s in replica
            )
            for replica in bind["placements"]
        )
        lines.append(f"  bind job {bind['job']}: {where}")
    for evict in decisions.get("evictions", []):
        by = f" for job {evict['by']}" if evict["by"] else ""
        lines.append(f"  evict job {evict['job']} ({evict['reason']}){by}")
    for change in decisions.get("reconfigurations", []):
        lines.append(f"  reconfigure {change['node']}/{change['gpu']}: {change['old']} → {change['new']}")
    for reject in decisions.get("rejections", []):
        lines.append(f"  reject job {reject['job']}: {reject['reason']}")
    lines.append(f"  {decisions.get('waiting', 0)} job(s) waiting")
    for failure in report.failed:
        lines.append(f"  not applied (next cycle repairs): {failure}")
    for job in report.requeued_after_refusal:
        lines.append(f"  job {job} requeued: the cluster refused its bind")
    return "\n".join(lines)
