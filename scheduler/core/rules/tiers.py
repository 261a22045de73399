"""Tier routing: which capacity tiers a job may use, in the order it prefers them.

Rules (``docs/scheduling-rules.md``), decided by the job's ``tier`` and ``priority``:

- ``reserved-only``: reserved nodes only.
- ``production`` priority never runs on spot (a spot interruption would take production down), whatever its tier.
- ``spot-ok``: spot first (cheapest; the work is checkpointed or restartable), then reserved (already paid
  for), then on-demand (billed by the hour).
- ``any``: reserved first (already paid for), then on-demand, then spot last (it can vanish with two minutes'
  notice, and work that did not say ``spot-ok`` may not checkpoint).

The rank of a tier in this tuple is the first criterion of every placement score, so a job lands on a
less preferred tier only when no preferred node can take it.
"""

from __future__ import annotations

from scheduler.core.model.snapshot import Job
from scheduler.core.model.vocabulary import CapacityTier, JobTier, Priority

_BY_JOB_TIER: dict[str, tuple[CapacityTier, ...]] = {
    JobTier.RESERVED_ONLY: (CapacityTier.RESERVED,),
    JobTier.SPOT_OK: (CapacityTier.SPOT, CapacityTier.RESERVED, CapacityTier.ON_DEMAND),
    JobTier.ANY: (CapacityTier.RESERVED, CapacityTier.ON_DEMAND, CapacityTier.SPOT),
}


def allowed_tiers(job: Job) -> tuple[CapacityTier, ...]:
    """The tiers ``job`` may run on, most preferred first (module rules); never empty."""
    return tiers_for(job.tier, job.priority)


def tiers_for(tier: str, priority: str) -> tuple[CapacityTier, ...]:
    """:func:`allowed_tiers` of a job with this ``tier`` and ``priority`` (for a job not built yet, such as a
    submit form's); raises ValueError for a tier that is not a :class:`JobTier`."""
    tiers = _BY_JOB_TIER[JobTier(tier)]
    if priority == Priority.PRODUCTION:
        tiers = tuple(t for t in tiers if t != CapacityTier.SPOT)
    return tiers


def tier_rank(job: Job) -> dict[str, int]:
    """Tier value → preference rank (0 best) for the tiers ``job`` may use; a missing tier is forbidden."""
    return {tier.value: rank for rank, tier in enumerate(allowed_tiers(job))}
