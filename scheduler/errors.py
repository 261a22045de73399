"""Typed errors of the scheduler's services; the edge turns them into 400/409 with the same message."""

from __future__ import annotations


class InventoryError(ValueError):
    """A fleet inventory write that cannot be made as asked; the message says what to change."""
