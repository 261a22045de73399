"""Django settings for Microcosm.

Every setting that varies between deployments is read here, once, through the typed readers in
``portal/env.py``; nothing else in the project reads the environment. The README lists every variable.
"""

from __future__ import annotations

from pathlib import Path

from portal.env import (
    EnvError,
    env_bool,
    env_choice,
    env_database,
    env_float,
    env_int,
    env_list,
    env_redis_url,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DEBUG", default=False)

# The development key is only ever used with DEBUG on; production must bring its own.
_DEV_SECRET_KEY = "django-insecure-microcosm-development-only-key-never-use-in-production-0123"
if DEBUG:
    SECRET_KEY = env_str("SECRET_KEY", default=_DEV_SECRET_KEY)
else:
    SECRET_KEY = env_str("SECRET_KEY", default="")
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure"):
        raise EnvError(
            "SECRET_KEY must be set to at least 50 random characters when DEBUG is off (or set DEBUG=1 "
            "for local development); generate one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'."
        )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", default=[])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise EnvError(f"CSRF_TRUSTED_ORIGINS item {_origin!r} must start with http:// or https://.")

DATABASES = {"default": env_database("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'microcosm.sqlite3'}")}
REDIS_URL = env_redis_url("REDIS_URL", default="redis://127.0.0.1:6379/0")

# Which cluster the scheduling loop drives: the embedded simulated fleet, or a real Kubernetes cluster.
CLUSTER_BACKEND = env_choice("CLUSTER_BACKEND", ("simulated", "kubernetes"), default="simulated")

# The scheduler's tunables, in one place; scheduler/services.py turns them into a frozen core Policy.
SCHEDULER = {
    "cycle_s": env_int("SCHEDULER_CYCLE_S", default=10, minimum=1, maximum=3600),
    "simulated_speed": env_float("SIMULATED_SPEED", default=60.0, minimum=0.001, maximum=1e6),
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "portal",
    "teams",
    "scheduler",
    "jobs",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]
if not DEBUG:
    # WhiteNoise serves the collected, hashed assets in production; with DEBUG on, runserver serves them from
    # the source folders and there is nothing collected yet.
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}

# Production hardening: on whenever DEBUG is off, so `manage.py check --deploy` is clean. TLS is assumed
# to terminate at a proxy that sets X-Forwarded-Proto.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = 0 if DEBUG else 31_536_000
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO"),
    },
}
