"""mozilla-django-oidc's backend, with what the portal adds: the ID token's issuer and audience checked, users
named by (issuer, sub), local accounts never taken over, and teams and roles recomputed from the groups claim.

Not in ``AUTHENTICATION_BACKENDS``: the callback view (portal/sso/views.py) calls it directly, so the password
chain (django-axes, then ModelBackend) stays as it is and an SSO sign-in is never counted by the lockout.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.db import transaction
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from audit.context import acting
from portal.models import SsoIdentity
from portal.sso.discovery import provider_endpoints
from portal.sso.errors import SsoRefused
from teams.sso import SsoAccess, sso_access_sync

logger = logging.getLogger(__name__)

VIA = "sign-in (SSO)"  # the audit trail's "via" for what a sign-in changed (docs/audit.md)
_USERNAME_MAX = 150  # auth.User.username


class SsoBackend(OIDCAuthenticationBackend):
    """One sign-in: after ``authenticate`` returns a user, ``access`` says what the groups left them with."""

    def __init__(self) -> None:
        super().__init__()
        endpoints = provider_endpoints()
        self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token
        self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo
        self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks
        self.access: SsoAccess | None = None
        self.id_claims: dict[str, Any] = {}

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The library checks the signature, expiry and nonce; OIDC Core 1.0 §3.1.3.7 also requires the issuer to
        be the one configured and the audience to include this client (and ``azp``, when present, to be it)."""
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        client = settings.OIDC_RP_CLIENT_ID
        if payload.get("iss") != settings.OIDC_ISSUER:
            raise SuspiciousOperation(f"ID token issued by {payload.get('iss')!r}, not {settings.OIDC_ISSUER!r}.")
        if client not in audiences or payload.get("azp", client) != client:
            raise SuspiciousOperation(f"ID token for {audience!r}, not this client.")
        if "nonce" in kwargs:
            self.id_claims = payload
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        claims: dict[str, Any] = self.get_userinfo(access_token, id_token, payload)
        subject = payload.get("sub")
        # OIDC Core 1.0 §5.3.2: the UserInfo sub MUST match the ID token's, else the response is not used.
        if not subject or claims.get("sub") != subject:
            raise SuspiciousOperation("The userinfo response is for another subject than the ID token.")
        groups = self._groups({**payload, **claims})
        with transaction.atomic():
            user = self._user(str(subject), {**payload, **claims})
            with acting(actor=user, via=VIA):
                self.access = sso_access_sync(user=user, groups=groups)
            SsoIdentity.objects.filter(user=user).update(groups=groups, last_sign_in=timezone.now())
        if self.access.changes:
            logger.info("sso sign-in %s changed %s", user.get_username(), "; ".join(self.access.changes))
        return user

    def _groups(self, claims: dict[str, Any]) -> list[str]:
        """The groups claim as a list of names; absent means no group (and so no access the groups gave)."""
        name = settings.OIDC_GROUPS_CLAIM
        value = claims.get(name)
        if value is None:
            logger.warning("sso: the provider sent no %r claim; check OIDC_GROUPS_CLAIM and the client's scopes", name)
            return []
        if not isinstance(value, list) or not all(isinstance(group, str) for group in value):
            raise SsoRefused(f"The identity provider's {name!r} claim is not a list of group names.")
        return sorted(set(value))

    def _user(self, subject: str, claims: dict[str, Any]) -> User:
        """The account of (issuer, sub): linked before, or one the org file made for this name and nobody has
        signed in to (no usable password), or a new one. Never an account with a password or a superuser: a
        provider that lets people choose their username must not hand out the break-glass admin."""
        issuer = settings.OIDC_ISSUER
        identity = SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        email = claims.get("email") if isinstance(claims.get("email"), str) else ""
        if identity is not None:
            user = identity.user
        else:
            username = self._username(claims)
            existing = User.objects.filter(username=username).first()
            if existing is None:
                user = User(username=username)
                user.set_unusable_password()
                user.save()
            elif existing.has_usable_password() or existing.is_superuser:
                raise SsoRefused(
                    f"An account named {username!r} already exists here and signs in with its password; a platform "
                    "admin can remove its password (or rename it) to let single sign-on use it."
                )
            elif hasattr(existing, "sso_identity"):
                raise SsoRefused(
                    f"The account named {username!r} belongs to another person at the identity provider; ask a "
                    "platform admin."
                )
            else:
                user = existing
            SsoIdentity.objects.create(issuer=issuer, subject=subject, user=user)
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        return user

    def _username(self, claims: dict[str, Any]) -> str:
        name = settings.OIDC_USERNAME_CLAIM
        username = claims.get(name)
        if not isinstance(username, str) or not username:
            raise SsoRefused(f"The identity provider sent no {name!r} claim to name your account by.")
        try:
            if len(username) > _USERNAME_MAX:
                raise ValidationError(f"longer than {_USERNAME_MAX} characters")
            UnicodeUsernameValidator()(username)
        except ValidationError as exc:
            raise SsoRefused(f"The identity provider's username {username!r} is not one the portal takes.") from exc
        return username
