"""Sign-in lockout with one limit per count: django-axes' database handler, whose single ``AXES_FAILURE_LIMIT``
would otherwise apply to all three of ``AXES_LOCKOUT_PARAMETERS`` (username and address together, username
alone, address alone); and the account owner's unlock.

axes takes the largest of the three failure counts and locks when it reaches ``AXES_FAILURE_LIMIT``
(``AxesDatabaseHandler.get_failures``, ``user_login_failed``, ``is_locked``). Here each count is scaled
to the pair's limit first, so the account-wide count locks at ``LOGIN_ACCOUNT_FAILURE_LIMIT`` and the
address-wide one at ``LOGIN_ADDRESS_FAILURE_LIMIT``: a lower wide limit would let any stranger lock an owner out
with five guesses, and lock a whole office behind one address out after five typos between them.
"""

from __future__ import annotations

from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_lockout_parameters
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone


def failure_limits() -> dict[tuple[str, ...], int]:
    """Each lockout parameter (as axes names it, a tuple for a combination) and the failures that lock it."""
    return {
        ("username", "ip_address"): settings.LOGIN_FAILURE_LIMIT,
        ("username",): settings.LOGIN_ACCOUNT_FAILURE_LIMIT,
        ("ip_address",): settings.LOGIN_ADDRESS_FAILURE_LIMIT,
    }


class LockoutHandler(AxesDatabaseHandler):
    def get_failures(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        """The failures of the count nearest its own limit, on the scale of ``AXES_FAILURE_LIMIT``: at least
        that limit exactly when some count has reached its own (``floor(f * pair / own) >= pair`` iff
        ``f >= own``)."""
        pair = settings.AXES_FAILURE_LIMIT
        limits = failure_limits()
        parameters = get_lockout_parameters(request, credentials)
        attempts_list = self.get_user_attempts(request, credentials)
        scaled = [0]
        for parameter, attempts in zip(parameters, attempts_list, strict=True):
            name = (parameter,) if isinstance(parameter, str) else tuple(parameter)
            failures = attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
            scaled.append(failures * pair // limits.get(name, pair))
        return max(scaled)

    def reset_user_attempts(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        """After a successful sign-in, forget that username's failures (from any address) and nothing else:
        axes would also delete every row of the address, so one good password of a sprayer's own would wipe
        the address-wide count of the other accounts it guessed at."""
        return account_unlock(username=get_client_username(request, credentials))


def account_unlock(*, username: str) -> int:
    """Forget every failed sign-in recorded for ``username`` (whatever the address), which lifts the pair and
    account-wide locks on it; an address-wide lock concerns other accounts too and is an admin's to lift
    (``manage.py axes_reset_ip``). Returns the number of attempt rows removed."""
    removed, _ = AccessAttempt.objects.filter(username=username).delete()
    return removed


def account_failures(*, username: str) -> dict[str, Any]:
    """Recent failed sign-ins on ``username`` for its owner: how many, from how many addresses, the latest, and
    whether they lock the account now (the pair count is per address; the owner sees the account-wide one)."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME  # older rows no longer count (axes removes them lazily)
    attempts = AccessAttempt.objects.filter(username=username, attempt_time__gte=since)
    total = attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
    latest = attempts.order_by("-attempt_time").values_list("attempt_time", flat=True).first()
    worst = max((a.failures_since_start for a in attempts), default=0)
    return {
        "failures": total,
        "addresses": attempts.values("ip_address").distinct().count(),
        "latest": latest,
        "locked": total >= settings.LOGIN_ACCOUNT_FAILURE_LIMIT or worst >= settings.LOGIN_FAILURE_LIMIT,
    }
