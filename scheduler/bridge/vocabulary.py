"""Names the loop records under and the apps read back: kept here so that an app reading them needs no import
of the loop (which imports the job services)."""

from __future__ import annotations

# The cycle's fence row (scheduler.models.SchedulerFence): the loop's record step locks it first
# (scheduler.loop.record.fence_check), and a lead's change to the queue order takes it too
# (jobs.services.positions.positions_lock), so that the two never interleave.
FENCE_NAME = "cycle"

ADMIN_DRAIN = "admin-drain"  # the source an admin's drain is recorded under, beside a notice's (aws, gke, ...)
