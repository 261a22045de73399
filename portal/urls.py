"""Root URLs: sign-in pages, the home page, the admin, a health probe and the Prometheus metrics; the team lead's
pages, the cluster view, and the REST API with its OpenAPI schema and interactive docs."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import views
from portal.metrics import views as metrics_views
from portal.signin import AdminSignInForm, SignInForm
from scheduler import views as scheduler_views

admin.site.site_header = "Microcosm administration"
admin.site.site_title = "Microcosm admin"
admin.site.index_title = "Platform"
admin.site.login_form = AdminSignInForm  # the username's length checked (portal/signin.py)

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics_views.metrics, name="metrics"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("admin/", admin.site.urls),
    path("oidc/", include("portal.sso.urls")),  # single sign-on (portal/sso); 404 unless OIDC_ISSUER is set
    path("accounts/token/", views.api_token, name="api_token"),
    path("accounts/token/revoke/", views.api_token_revoke_view, name="api_token_revoke"),
    path("accounts/sign-ins/", views.sign_ins, name="sign_ins"),
    path("cluster/", scheduler_views.cluster, name="cluster"),
    path("", include("jobs.pages.urls")),
    path("", include("billing.urls")),
    path("api/v1/", include("portal.api_urls")),
    path("api/schema/", views.ApiSchemaView.as_view(), name="api-schema"),
    path("api/docs/", views.ApiDocsView.as_view(url_name="api-schema"), name="api-docs"),
]

# An exception no view handles: JSON under /api/, the 500 page elsewhere (4xx pages under /api/ become JSON in
# portal.request_guard; a database that is down answers 503 in portal.busy).
handler500 = "portal.errors.server_error"
