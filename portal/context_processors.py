"""Template context of the portal's pages: the navigation every page needs, and the simulated fleet's clock speed
for the pages that show times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils import timezone

from jobs.templatetags.portal_format import seconds
from teams.models import Membership
from teams.roles import is_finance, is_platform_admin


def navigation(request: HttpRequest) -> dict[str, Any]:
    """Org-wide roles (for the Finance and Admin links), whether the team pages are any use to the user, and the
    time zone the page's times are shown in.

    ``nav_teams`` is False only for a finance user who belongs to no team: Dashboard, Submit and Queue would
    show them nothing but "not a member", so their navigation leaves those out (they land on billing).

    Runs only when a template renders (never for API responses): at most three small queries per page."""
    user = getattr(request, "user", None)
    zone = timezone.get_current_timezone_name()
    if user is None or not user.is_authenticated:
        return {"nav_finance": False, "nav_admin": False, "nav_teams": False, "time_zone_name": zone}
    admin = is_platform_admin(user)
    finance = not admin and is_finance(user)
    return {
        "nav_admin": admin,
        "nav_finance": admin or finance,
        "nav_teams": not finance_without_team(user) if finance else True,
        "time_zone_name": zone,
    }


def finance_without_team(user: User) -> bool:
    """A finance user (the caller checked) who is a member of no team."""
    return not Membership.objects.filter(user_id=user.pk).exists()


# The pages that show job times (submitted, started, expected start, durations): the simulated fleet's clock runs
# faster than the wall clock, so on these a reader must be told why a 1-hour job ends after a minute.
TIMED_PAGES = frozenset({"home", "jobs:dashboard", "jobs:list", "jobs:queue", "jobs:detail", "jobs:manage"})
HOUR_S = 3600.0


@dataclass(frozen=True)
class SimulatedClock:
    """How fast the simulated fleet runs jobs: ``speed`` job seconds per wall-clock second."""

    speed: float

    @property
    def speed_label(self) -> str:
        return f"{self.speed:,.10g}×"

    @property
    def hour_takes(self) -> str:
        """The wall-clock time a job of one hour takes on the fleet: ``1 min`` at 60×."""
        wall_s = HOUR_S / self.speed
        return seconds(wall_s) if wall_s >= 1 else "less than a second"


def simulated_clock(request: HttpRequest) -> dict[str, Any]:
    """``simulated_clock`` on the pages that show times when the simulated fleet is the cluster; None on every
    other page and always on a real cluster (``CLUSTER_BACKEND`` other than ``simulated``)."""
    match = getattr(request, "resolver_match", None)
    if settings.CLUSTER_BACKEND != "simulated" or match is None or match.view_name not in TIMED_PAGES:
        return {"simulated_clock": None}
    return {"simulated_clock": SimulatedClock(speed=float(settings.SCHEDULER["simulated_speed"]))}


def sso(request: HttpRequest) -> dict[str, Any]:
    """Whether the sign-in page offers "Sign in with <provider>" (single sign-on, portal/sso)."""
    return {"sso_enabled": settings.SSO_ENABLED, "sso_provider_name": settings.SSO_PROVIDER_NAME}
