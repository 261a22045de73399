"""Organisation-wide roles, kept as Django groups.

Team roles (``lead``, ``member``) live on :class:`teams.models.Membership`. Two roles span every team:
``finance`` (reads cost reports for all teams) and ``platform-admin`` (runs the platform from the admin).
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User

FINANCE = "finance"
PLATFORM_ADMIN = "platform-admin"
ORG_ROLES = (FINANCE, PLATFORM_ADMIN)

AnyUser = User | AnonymousUser  # whoever made a request, signed in or not


def has_org_role(user: AnyUser, role: str) -> bool:
    if not user.is_authenticated or not user.is_active:
        return False
    return user.groups.filter(name=role).exists()


def is_platform_admin(user: AnyUser) -> bool:
    return bool(getattr(user, "is_superuser", False)) or has_org_role(user, PLATFORM_ADMIN)


def is_finance(user: AnyUser) -> bool:
    return has_org_role(user, FINANCE)
