"""Moved to :mod:`scheduler.core.rules.fairshare`; this name remains only until the apps (``billing``,
``jobs``) import from there. Nothing in the engine imports it."""

from scheduler.core.rules.fairshare import PRIORITY_INDEX, FairShare, job_class

__all__ = ["PRIORITY_INDEX", "FairShare", "job_class"]
