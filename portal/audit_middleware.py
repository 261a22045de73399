"""django-auditlog's middleware (the audit app records, the portal composes), with the caller's address read as
the sign-in lockout reads it."""

from __future__ import annotations

from typing import Any

from auditlog.middleware import AuditlogMiddleware
from django.http import HttpRequest

from portal.views import client_address

ADMIN_PREFIX = "/admin/"


class AuditMiddleware(AuditlogMiddleware):
    """The signed-in user is the actor of every audited change a request makes; ``via`` says whether it came
    through the admin or the portal's own pages.

    django-auditlog trusts the first X-Forwarded-For entry, which the caller writes; the address recorded here
    is :func:`portal.views.client_address`'s, which counts only the proxies named in ``TRUSTED_PROXY_COUNT``."""

    def get_extra_data(self, request: HttpRequest) -> dict[str, Any]:
        data: dict[str, Any] = super().get_extra_data(request)
        data["remote_addr"] = client_address(request) or None
        data["additional_data"] = {"via": "admin" if request.path.startswith(ADMIN_PREFIX) else "portal"}
        return data
