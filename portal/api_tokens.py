"""API tokens: made and revoked by their owner on the token page, their last use recorded on authentication.

A token's key is shown once, in the answer to the request that made it; afterwards the page shows only its
first characters (:data:`PREFIX_CHARS`), when it was made and when it was last used. The last use is written at
most once a minute (:data:`LAST_USED_RESOLUTION`), so a busy API client costs one read per request, not a write.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from portal.models import ApiTokenUse

PREFIX_CHARS = 6  # enough to tell two tokens apart in a config file, far too few to guess the rest
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_token_create(*, user: User) -> Token:
    """Give ``user`` a new token; the one they had stops working at once. The caller shows ``key`` once."""
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        return Token.objects.create(user=user)


def api_token_revoke(*, user: User) -> bool:
    """Delete ``user``'s token (it stops working at once); False when they had none."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted > 0


def api_token_touch(*, token: Token, now: datetime | None = None) -> None:
    """Record that ``token`` was used now, unless a use within :data:`LAST_USED_RESOLUTION` is recorded."""
    at = now or timezone.now()
    last = ApiTokenUse.objects.filter(token_id=token.pk).values_list("last_used_at", flat=True).first()
    if last is not None and at - last < LAST_USED_RESOLUTION:
        return
    ApiTokenUse.objects.update_or_create(token_id=token.pk, defaults={"last_used_at": at})


def api_token_last_used(token: Token) -> datetime | None:
    return ApiTokenUse.objects.filter(token_id=token.pk).values_list("last_used_at", flat=True).first()


def api_token_prefix(token: Token) -> str:
    return token.key[:PREFIX_CHARS]


class LastUsedTokenAuthentication(TokenAuthentication):
    """DRF's token authentication (``Authorization: Token <key>``) that records the token's last use."""

    def authenticate_credentials(self, key: str) -> tuple[AbstractBaseUser, Token]:
        user, token = super().authenticate_credentials(key)
        api_token_touch(token=token)
        return user, token
