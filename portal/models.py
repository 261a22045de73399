"""When each API token was last used (DRF's ``Token`` records only when it was created); who a single sign-on
identity is."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from rest_framework.authtoken.models import Token


class ApiTokenUse(models.Model):
    """The last time a request authenticated with ``token``, to the minute (:mod:`portal.api_tokens` writes it at
    most once a minute). Goes with its token: a replaced or revoked token takes its row along."""

    token = models.OneToOneField(Token, on_delete=models.CASCADE, primary_key=True, related_name="use")
    last_used_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.token.user} last used {self.last_used_at:%Y-%m-%d %H:%M}"


class SsoIdentity(models.Model):
    """The account an identity provider's user signs in as: OpenID Connect names a person by ``iss`` and ``sub``
    (Core 1.0 §2: "unique and never reassigned"), not by an email or a username a provider lets people change."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    groups = models.JSONField(default=list, help_text="The groups claim of the last sign-in.")
    last_sign_in = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "single sign-on identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="ssoidentity_unique")]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject} at {self.issuer})"
