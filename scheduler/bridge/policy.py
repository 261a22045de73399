"""The one reader of ``settings.SCHEDULER``: the engine's :class:`~scheduler.core.Policy` for the loop and for
every app that asks what the engine would do (the submit form's right-sizing, the submit screen).

A key that neither the engine nor the loop knows is an error, not a silent default: a misspelt setting
(``cycle_secs``) would otherwise leave the engine on its default while the operator believes it changed.
"""

from __future__ import annotations

from dataclasses import fields, replace

from django.conf import settings

from scheduler.core import Policy

POLICY_KEYS = frozenset(f.name for f in fields(Policy))
# settings.SCHEDULER keys that tune the loop rather than the engine (simulated_* tune the simulated fleet).
LOOP_KEYS = frozenset(
    {
        "lock_backend",
        "lock_name",
        "lock_ttl_s",
        "lock_hold_max_s",
        "evict_grace_s",
        "move_ready_s",
        "apply_attempts",
        "apply_backoff_s",
        "node_request_timeout_s",
    }
)


def policy_current() -> Policy:
    """``settings.SCHEDULER`` as the engine's frozen :class:`~scheduler.core.Policy` (unknown keys: error)."""
    values = settings.SCHEDULER
    unknown = sorted(k for k in values if k not in POLICY_KEYS | LOOP_KEYS and not k.startswith("simulated_"))
    if unknown:
        raise ValueError(f"unknown SCHEDULER settings: {', '.join(unknown)}")
    return Policy.from_mapping({k: v for k, v in values.items() if k in POLICY_KEYS})


def policy_at_speed(clock_speed: float) -> Policy:
    """:func:`policy_current` for a cluster whose jobs run ``clock_speed`` virtual seconds per real second: the
    engine's MIG delay estimate is virtual time on the simulated fleet, like job durations, so it is divided too."""
    policy = policy_current()
    speed = clock_speed if clock_speed > 0 else 1.0
    return replace(policy, mig_reconfigure_s=policy.mig_reconfigure_s / speed)
