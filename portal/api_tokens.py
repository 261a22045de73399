"""API tokens: made and revoked by their owner on the token page, their last use recorded on authentication.

A token's key is shown once, in the answer to the request that made it; afterwards the page shows only its
first characters (:data:`PREFIX_CHARS`), when it was made and when it was last used. The last use is written at
most once a minute (:data:`LAST_USED_RESOLUTION`), so a busy API client costs one read per request, not a write.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from portal.models import ApiTokenUse

PREFIX_CHARS = 6  # enough to tell two tokens apart in a config file, far too few to guess the rest
LAST_USED_RESOLUTION = timedelta(minutes=1)

log = logging.getLogger(__name__)


def api_token_create(*, user: User) -> Token:
    """Give ``user`` a new token; the one they had stops working at once. The caller shows ``key`` once."""
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        return Token.objects.create(user=user)


def api_token_revoke(*, user: User) -> bool:
    """Delete ``user``'s token (it stops working at once); False when they had none."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted > 0


def api_token_touch(*, token: Token, now: datetime | None = None) -> bool:
    """Record that ``token`` was used now, unless a use within :data:`LAST_USED_RESOLUTION` is recorded; True
    when this call wrote it.

    Never fails the request that authenticated: the record is a convenience, the request is the work. A write
    that fails (the embedded SQLite busy past its timeout, a database going away) is logged and skipped; the next
    use a minute on records it. The write is conditional on the row still being older than the resolution, so
    concurrent requests (threads, web replicas) write it once between them.
    """
    at = now or timezone.now()
    try:
        last = api_token_last_used(token)
        if last is not None and at - last < LAST_USED_RESOLUTION:
            return False  # the common case: a read, no write, no lock
        # A savepoint when the caller is inside a transaction, so a failure here leaves theirs usable.
        with transaction.atomic():
            if last is None:
                ApiTokenUse.objects.create(token_id=token.pk, last_used_at=at)
                return True
            due = ApiTokenUse.objects.filter(token_id=token.pk, last_used_at__lte=at - LAST_USED_RESOLUTION)
            return due.update(last_used_at=at) > 0
    except IntegrityError:
        return False  # another request recorded the first use meanwhile
    except DatabaseError as exc:
        log.warning("API token %s: last use not recorded (%s); the request goes on", api_token_prefix(token), exc)
        return False


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
