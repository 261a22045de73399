"""``{% job_time_rule %}``: the line a job's page shows on the simulated fleet, saying how its time is billed.

The rule (docs/billing.md, The demo's time): the simulated fleet runs work ``simulated_speed`` times faster than
the wall clock (60× in the demo: a job's hour of work takes a minute), and the ledger bills **wall time** — the
same clock the fleet's capacity is paid on (billing.capacity), so usage never exceeds capacity and idle capacity
stays meaningful. A job that did an hour of work at 60× is billed one GPU-minute per GPU. On a real cluster the
two clocks are one and the line is not shown.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings

register = template.Library()


def simulated_speed() -> float | None:
    """Virtual seconds of job work per wall second on the simulated fleet; None on a real cluster (or at 1×)."""
    if settings.CLUSTER_BACKEND != "simulated":
        return None
    speed = float(settings.SCHEDULER["simulated_speed"])
    return speed if speed != 1 else None


@register.inclusion_tag("billing/partials/job_time_rule.html")
def job_time_rule() -> dict[str, Any]:
    speed = simulated_speed()
    return {"speed": speed, "wall_s_per_job_hour": 3600 / speed if speed else None}
