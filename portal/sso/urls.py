"""``/oidc/``: the redirect URI to register at the provider is ``https://<portal>/oidc/callback/``."""

from django.urls import path

from portal.sso import views

urlpatterns = [
    path("authenticate/", views.SsoStartView.as_view(), name="oidc_authentication_init"),
    path("callback/", views.SsoCallbackView.as_view(), name="oidc_authentication_callback"),
    path("no-team/", views.no_team, name="sso_no_team"),
]
