"""When each API token was last used: DRF's ``Token`` records only when it was created."""

from __future__ import annotations

from django.db import models
from rest_framework.authtoken.models import Token


class ApiTokenUse(models.Model):
    """The last time a request authenticated with ``token``, to the minute (:mod:`portal.api_tokens` writes it at
    most once a minute). Goes with its token: a replaced or revoked token takes its row along."""

    token = models.OneToOneField(Token, on_delete=models.CASCADE, primary_key=True, related_name="use")
    last_used_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.token.user} last used {self.last_used_at:%Y-%m-%d %H:%M}"
