"""Typed errors of single sign-on; each message is written for the person who sees the refusal page."""

from __future__ import annotations


class SsoError(Exception):
    """Base class of every error single sign-on raises on purpose."""


class SsoRefused(SsoError):
    """The provider vouched for someone the portal does not let in this way (a local account's name, no username
    claim, a token for another client); answered 403 with the message."""


class SsoUnavailable(SsoError):
    """The provider cannot be reached or answers nonsense (discovery, token, userinfo); answered 503."""
