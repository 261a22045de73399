"""The decision engine: pure Python, no Django, Celery, Redis or kubernetes (see DESIGN.md §2).

The public API — what the rest of Microcosm may import from ``scheduler.core`` — is pinned by
``tests/scheduler/core/test_public_api.py``: the cycle's entry point, the question a submit asks it before
writing (:func:`rejection_reason`), and the frozen values they take and give.
"""

from scheduler.core.cycle import plan_cycle, rejection_reason
from scheduler.core.plan import Bind, Evict, Plan, Reconfigure, Reject, Waiting
from scheduler.core.policy import Policy
from scheduler.core.state import Job, ModelProfile, Node, Preemption, Request, Running, Slot, Snapshot, Team

__all__ = [
    "Bind",
    "Evict",
    "Job",
    "ModelProfile",
    "Node",
    "Plan",
    "Policy",
    "Preemption",
    "Reconfigure",
    "Reject",
    "Request",
    "Running",
    "Slot",
    "Snapshot",
    "Team",
    "Waiting",
    "plan_cycle",
    "rejection_reason",
]
