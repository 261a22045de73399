"""Root URLs: sign-in pages, the home page, the admin and a health probe."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from portal import views

admin.site.site_header = "Microcosm administration"
admin.site.site_title = "Microcosm admin"
admin.site.index_title = "Platform"

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("admin/", admin.site.urls),
]
