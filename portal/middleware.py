"""Show times in the reader's time zone.

Nothing about a user says where they are, but their browser knows: ``static/js/portal.js`` writes
``Intl.DateTimeFormat().resolvedOptions().timeZone`` into the ``tz`` cookie, and this middleware activates it
for the request, so templates render every datetime in local time. An unknown or junk zone falls back to UTC
(``settings.TIME_ZONE``) rather than failing the page.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from functools import lru_cache
from urllib.parse import unquote

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

TZ_COOKIE = "tz"


@lru_cache(maxsize=512)
def zone_named(name: str) -> zoneinfo.ZoneInfo | None:
    """The IANA zone ``name`` (e.g. ``Europe/Paris``), or None when it is not one."""
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


class BrowserTimezoneMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # The page writes the name URI-encoded ("Asia%2FTokyo"): a slash is not a safe cookie character.
        zone = zone_named(unquote(request.COOKIES.get(TZ_COOKIE, "")))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
