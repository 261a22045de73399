"""``manage.py scheduler run [--json] [--cycles N]``: the scheduling loop in the foreground, without Celery
beat — a cycle every ``SCHEDULER_CYCLE_S`` under the single-flight lock (so it can run beside workers; each cycle
handles spot notices itself), plus a cluster sync, MIG watch and utilization sample every few cycles.
Ctrl-C (or SIGTERM) stops it cleanly after the current step.

It outlives its services: when Redis, the database or the cluster is unreachable it logs one line, waits a
capped exponential backoff (1 s doubling to 30 s), tries again until the service answers, and logs one line
when it does (:mod:`scheduler.bridge.outage`). ``--cycles`` counts the steps that ran, not the tries an outage
cost. Each step starts like a web request: connections past ``CONN_MAX_AGE`` or broken are closed first,
and ``CONN_HEALTH_CHECKS`` (when on) checks the connection again before the step's first query."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from scheduler.bridge.outage import OUTAGE_ERRORS, Outages, connections_refresh, outage_note
from scheduler.errors import FencingError, GatewayConflict
from scheduler.gateways import gateway_get
from scheduler.loop.cycle import cycle_run
from scheduler.loop.locks import single_flight
from scheduler.management.commands.schedule import report_text
from scheduler.services.mig import cluster_maintain
from scheduler.services.samples import utilization_record
from scheduler.services.sync import cluster_sync
from scheduler.tasks import MIG_STUCK_AFTER_S

_HOUSEKEEPING_EVERY = 6  # cycles between cluster sync / MIG watch / utilization sample


class Command(BaseCommand):
    help = "Run the scheduling loop in the foreground (no Celery needed); Ctrl-C stops it."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{run}")
        run = actions.add_parser("run", help="Cycle every SCHEDULER_CYCLE_S until stopped.")
        run.add_argument("--json", action="store_true", help="One JSON object per cycle (JSON lines).")
        run.add_argument("--cycles", type=int, default=0, help="Stop after this many cycles that ran (default: never).")
        run.add_argument("--interval-s", type=float, default=None, help="Seconds between cycles (default: setting).")

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        interval = options["interval_s"] if options["interval_s"] is not None else settings.SCHEDULER["cycle_s"]
        count = 0
        outages = Outages()
        try:
            while not stop.is_set():
                started = time.monotonic()
                connections_refresh()  # a step is a unit of work, like a request (module doc)
                try:
                    self._step(count, as_json=options["json"])
                except OUTAGE_ERRORS as exc:
                    noted = outage_note(outages, exc)
                    if noted is None:
                        raise
                    stop.wait(noted[1])
                    continue
                outages.succeeded()
                count += 1
                if options["cycles"] and count >= options["cycles"]:
                    break
                stop.wait(max(interval - (time.monotonic() - started), 0.0))
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
        if not options["json"]:
            self.stdout.write(f"stopped after {count} cycle(s)")

    def _step(self, count: int, *, as_json: bool) -> None:
        with single_flight() as lease:
            if lease is None:
                self._emit(
                    {"skipped": "another cycle holds the lock"}, "cycle skipped: another cycle holds the lock", as_json
                )
                return
            try:
                gateway = gateway_get()
                if count % _HOUSEKEEPING_EVERY == 0:
                    observation = gateway.observe()
                    cluster_sync(observation=observation)
                    cluster_maintain(gateway=gateway, stuck_after_s=MIG_STUCK_AFTER_S)
                    utilization_record(readings=gateway.utilization(), at=timezone.now())
                report = cycle_run(gateway=gateway, fence_token=lease.token, lease=lease)
            except (GatewayConflict, FencingError) as exc:  # not an outage: the next period tries afresh
                self._emit({"error": str(exc)}, f"cycle failed, retrying next period: {exc}", as_json)
                return
        self._emit(report.as_json(), report_text(report), as_json)

    def _emit(self, data: dict[str, Any], text: str, as_json: bool) -> None:
        self.stdout.write(json.dumps(data) if as_json else text)
        self.stdout.flush()
