"""Requests as the views receive them, for the type checker.

A view behind ``login_required`` (or the API's default ``IsAuthenticated``) only ever runs for an account, so
its ``request.user`` is a :class:`~django.contrib.auth.models.User`, never ``AnonymousUser``; django-htmx's
middleware sets ``request.htmx`` on every request. Django's and DRF's own request types cannot say either,
so views that rely on them annotate ``request`` with these.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails
from rest_framework.request import Request


class SignedInRequest(HttpRequest):
    """A portal page's request after sign-in and the middleware."""

    user: User
    htmx: HtmxDetails


class SignedInApiRequest(Request):
    """An API request that passed authentication."""

    user: User
