"""Moved to :mod:`scheduler.core.rules.limits`; this name remains only until the apps (``billing``, ``jobs``)
import from there. Nothing in the engine imports it."""

from scheduler.core.rules.limits import ANY, burst_limits, fill_fits, guarantee_limits

__all__ = ["ANY", "burst_limits", "fill_fits", "guarantee_limits"]
