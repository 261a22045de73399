"""Idempotent writes: a write sent again with the same key answers what the first one answered, once.

The contract is the IETF's ``Idempotency-Key`` (draft-ietf-httpapi-idempotency-key-header-06) as Stripe
implements it, which is what API clients expect:

- the key is the client's, unique per user (two users may pick the same one), at most 255 printable ASCII
  characters (:func:`key_parse`; the draft's Structured Field string, quoted, is accepted too);
- the same key with the same request (endpoint and body: the draft's "fingerprint") answers the first answer,
  status and body, without writing anything; the same key with another request is refused
  (:class:`~jobs.errors.IdempotencyKeyReused`, 422 at the API), as is a key whose first request is still being
  answered (:class:`~jobs.errors.IdempotencyKeyInFlight`, 409);
- only a write that succeeded is kept: a refused one wrote nothing, so sending it again (after fixing it, or
  once the pending cap has room) with the same key simply tries again;
- a key is kept :data:`KEY_TTL` (24 h, Stripe's) from its first use; later the same key is a new key.

**One transaction.** The key's row is written in the transaction of the write it answers, after it, with the
answer in it: a dropped connection leaves both or neither, never a job without its key nor a key without its
answer. When PostgreSQL commits and the connection drops before the client hears back, the client's retry
finds the key and gets the stored answer. When it drops before the commit, nothing was written and the retry
does the write.

**In flight.** On PostgreSQL the transaction first takes a transaction-scoped advisory lock on (user, key)
without waiting (``pg_try_advisory_xact_lock``); a second request with the key meanwhile is refused at once
rather than queued behind the first, and the lock goes with the first one's transaction, however it ends (a
terminated backend included). SQLite runs one writing transaction at a time (``transaction_mode`` IMMEDIATE in
``portal/settings.py``), so there a second request waits for the first and then replays it. Either way the
unique constraint on (user, key) is the last word: a second row cannot commit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from jobs.errors import IdempotencyKeyInFlight, IdempotencyKeyInvalid, IdempotencyKeyReused
from jobs.models import IdempotencyKey

KEY_TTL = timedelta(hours=24)  # Stripe's: "keys are eligible to be removed … after they're at least 24 hours old"
MAX_KEY_CHARS = 255
HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class Answer:
    """What a write answered: an HTTP status and a JSON body."""

    status: int
    body: Any


@dataclass(frozen=True)
class Outcome:
    """The answer, and whether it is the stored answer of an earlier request with the key (nothing written)."""

    answer: Answer
    replayed: bool


def key_parse(raw: str) -> str:
    """The key a header (or form field) carries, or :class:`IdempotencyKeyInvalid` saying what is wrong.

    The draft makes the header a Structured Field string (RFC 8941 §3.3.3: ``"…"``, printable ASCII); Stripe
    and most clients send the bare value. Both are read: surrounding quotes are dropped."""
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not key:
        raise IdempotencyKeyInvalid(f"{HEADER} is empty: send a unique value per request, e.g. a UUID")
    if len(key) > MAX_KEY_CHARS:
        raise IdempotencyKeyInvalid(f"{HEADER} has {len(key)} characters; at most {MAX_KEY_CHARS} are allowed")
    if any(not (0x20 <= ord(c) <= 0x7E) for c in key):
        raise IdempotencyKeyInvalid(f"{HEADER} must be printable ASCII (letters, digits, punctuation), e.g. a UUID")
    return key


def fingerprint(*, endpoint: str, body: Any) -> str:
    """sha256 of the endpoint and the body read as JSON, keys sorted: the same request sent again by a client
    that orders its keys differently is still the same request."""
    text = json.dumps([endpoint, body], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def idempotent_write(
    *,
    user: User,
    key: str,
    fingerprint: str,
    write: Callable[[], Answer],
    now: datetime | None = None,
) -> Outcome:
    """Run ``write`` once for ``(user, key)`` and keep its answer (module doc); ``write`` runs inside this
    transaction, so what it writes commits with the key or not at all.

    Raises :class:`IdempotencyKeyReused` when the key answered another request (another ``fingerprint``),
    :class:`IdempotencyKeyInFlight` when a request with the key is still running; whatever ``write`` raises
    passes through with nothing written and no key kept.
    """
    at = now or timezone.now()
    try:
        with transaction.atomic():
            _claim(user, key)
            row = IdempotencyKey.objects.filter(user=user, key=key).first()
            if row is not None and row.created_at <= at - KEY_TTL:
                row.delete()
                row = None
            if row is not None:
                if row.fingerprint != fingerprint:
                    raise IdempotencyKeyReused(
                        f"{HEADER} {key!r} was already used for a different request (another body or endpoint) "
                        f"in the last {KEY_TTL.total_seconds() / 3600:.0f} hours: send a new key for a new request"
                    )
                return Outcome(Answer(row.status, row.body), replayed=True)
            answer = write()
            # The user's expired keys go with each new one, so the table holds about a day of each user's writes.
            IdempotencyKey.objects.filter(user=user, created_at__lte=at - KEY_TTL).delete()
            IdempotencyKey.objects.create(
                user=user, key=key, fingerprint=fingerprint, status=answer.status, body=answer.body, created_at=at
            )
            return Outcome(answer, replayed=False)
    except IntegrityError as exc:
        # Another transaction committed the key between our read and our insert (SQLite has no advisory lock
        # to keep it out); this one rolled back whole, its write included.
        if IdempotencyKey.objects.filter(user=user, key=key).exists():
            raise IdempotencyKeyInFlight(_in_flight(key)) from exc
        raise


def _claim(user: User, key: str) -> None:
    """PostgreSQL: take (user, key)'s advisory lock for this transaction, or refuse at once (module doc)."""
    if connection.vendor != "postgresql":
        return
    digest = hashlib.sha256(f"{user.pk}\0{key}".encode()).digest()
    lock_id = int.from_bytes(digest[:8], "big", signed=True)  # advisory locks take one signed 64-bit key
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_id])
        (taken,) = cursor.fetchone()
    if not taken:
        raise IdempotencyKeyInFlight(_in_flight(key))


def _in_flight(key: str) -> str:
    return f"a request with {HEADER} {key!r} is still being answered: retry in a moment to get its answer"
