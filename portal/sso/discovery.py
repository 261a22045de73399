"""The provider's endpoints: set one by one in the environment, or read from the issuer's discovery document.

OpenID Connect Discovery 1.0 §4: the document is at ``<issuer>/.well-known/openid-configuration`` and its
``issuer`` MUST equal the issuer it was fetched for (§4.3), else it is not used. Fetched at the first sign-in, not
at start-up (the portal must start while the provider is down), and kept for an hour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests
from django.conf import settings

from portal.sso.errors import SsoUnavailable

_KEEP_S = 3600.0
_cache: dict[str, tuple[float, dict[str, object]]] = {}


@dataclass(frozen=True)
class ProviderEndpoints:
    authorization: str
    token: str
    userinfo: str
    jwks: str


def _document(issuer: str) -> dict[str, object]:
    kept = _cache.get(issuer)
    if kept is not None and time.monotonic() - kept[0] < _KEEP_S:
        return kept[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise SsoUnavailable(f"The identity provider's discovery document {url} cannot be read: {exc}") from exc
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        raise SsoUnavailable(f"{url} names another issuer than {issuer}; check OIDC_ISSUER.")
    _cache[issuer] = (time.monotonic(), document)
    return document


def provider_endpoints() -> ProviderEndpoints:
    """Each endpoint as set in the environment, else as the discovery document says."""
    explicit = {
        "authorization": settings.OIDC_OP_AUTHORIZATION_ENDPOINT,
        "token": settings.OIDC_OP_TOKEN_ENDPOINT,
        "userinfo": settings.OIDC_OP_USER_ENDPOINT,
        "jwks": settings.OIDC_OP_JWKS_ENDPOINT,
    }
    if all(explicit.values()):
        return ProviderEndpoints(**explicit)
    document = _document(settings.OIDC_ISSUER)
    names = {"authorization": "authorization_endpoint", "token": "token_endpoint", "userinfo": "userinfo_endpoint"}
    names["jwks"] = "jwks_uri"
    found = {key: explicit[key] or document.get(name) for key, name in names.items()}
    missing = [names[key] for key, value in found.items() if not isinstance(value, str) or not value]
    if missing:
        raise SsoUnavailable(f"The identity provider's discovery document has no {', '.join(missing)}.")
    return ProviderEndpoints(**{key: str(value) for key, value in found.items()})


def discovery_forget() -> None:
    """Drop the kept documents (tests start providers on new ports)."""
    _cache.clear()
