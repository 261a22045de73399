"""Template context every page needs for its navigation."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.utils import timezone

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
