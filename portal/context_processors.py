"""Template context every page needs for its navigation."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from teams.roles import is_finance, is_platform_admin


def navigation(request: HttpRequest) -> dict[str, Any]:
    """Org-wide roles (for the Finance and Admin links) and the time zone the page's times are shown in.

    Runs only when a template renders (never for API responses): at most two small queries per page."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_finance": False, "nav_admin": False, "time_zone_name": timezone.get_current_timezone_name()}
    admin = is_platform_admin(user)
    return {
        "nav_admin": admin,
        "nav_finance": admin or is_finance(user),
        "time_zone_name": timezone.get_current_timezone_name(),
    }
