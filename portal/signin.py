"""The sign-in forms of the portal and of the admin: Django's, with the username's length enforced.

Django's ``AuthenticationForm`` sets the username field's ``max_length`` in ``__init__``, after the field was
built, so it only reaches the widget's ``maxlength`` attribute: the ``MaxLengthValidator`` is attached in
``CharField.__init__`` (Django 5.2, ``django.contrib.auth.forms.AuthenticationForm.__init__`` and
``django.forms.fields.CharField.__init__``). A 300-character username therefore reached ``authenticate()``,
and django-axes then recorded the failure in ``AccessAttempt.username``, a ``CharField(max_length=255)``
(``axes.models.AccessBase``): PostgreSQL refused the row and the sign-in page answered 500. Here the length is
checked with the other field checks, so such a username is a form error and never reaches ``authenticate()``
(nor axes, nor the database).
"""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.validators import MaxLengthValidator


class _UsernameLength(forms.Form):
    """Refuse a username longer than the user model's username column, before any password is checked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.CharField, self.fields["username"])  # Django's UsernameField, a CharField
        limit = field.max_length or 254  # AuthenticationForm's own fallback for a username without a length
        # self.fields is this form's deep copy of the class's fields: the validator is this instance's alone.
        field.validators.append(
            MaxLengthValidator(
                limit,
                message=f"A username has at most {limit} characters: check what you typed.",
            )
        )


class SignInForm(_UsernameLength, AuthenticationForm):
    """The portal's sign-in (``/accounts/login/``)."""


class AdminSignInForm(_UsernameLength, AdminAuthenticationForm):
    """The admin's sign-in (``/admin/login/``): staff only, as Django's."""
