"""Who the audit trail names for a change made outside a web request (a management command)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from auditlog.context import set_extra_data
from django.contrib.auth.models import User


@contextmanager
def acting(*, actor: User | None, via: str) -> Iterator[None]:
    """Every audit row written inside names ``actor`` (None: no person, e.g. a scheduled ``teams apply`` from
    CI) and records ``via``, the tool that made the change, so a row without a person still says where it
    came from."""
    with set_extra_data(context_data={"actor": actor, "additional_data": {"via": via}}):
        yield
