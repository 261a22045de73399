"""Single sign-on with OpenID Connect: mozilla-django-oidc's code flow with our checks, accounts and roles
(docs/security.md, Single sign-on)."""
