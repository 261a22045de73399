"""Django settings for Microcosm.

Every setting that varies between deployments is read here, once, through the typed readers in
``scheduler/env.py``; nothing else in the project reads the environment. The README lists every variable.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from csp.constants import NONE, SELF, UNSAFE_INLINE

from portal.log_formats import formatters as log_formatters
from scheduler.core import checkpointing
from scheduler.env import (
    EnvError,
    env_bool,
    env_choice,
    env_database,
    env_float,
    env_int,
    env_list,
    env_rate,
    env_redis_url,
    env_str,
)
from scheduler.gateways.kube.settings import KubernetesSettings, kubernetes_settings


# The shapes of the settings that are dicts, so that code reading them gets typed values (KUBERNETES's is the
# Kubernetes gateway's: KubernetesSettings).
class SchedulerSettings(TypedDict):
    """``SCHEDULER``: the engine's policy keys, the loop's own and the simulated fleet's (``simulated_*``)."""

    cycle_s: int
    reservation_depth: int
    default_runtime_s: float
    preemption_search_per_team: int
    provision_wait_s: float
    provision_retry_s: float
    release_idle_s: float
    simulated_speed: float
    simulated_interruptions_per_node_hour: float
    simulated_notice_s: float
    simulated_replace_after_s: float
    simulated_mig_reconfigure_s: float
    simulated_checkpoint_cost_s: float
    simulated_startup_s: float
    lock_backend: str
    lock_name: NotRequired[str]  # the Redis lock's key; absent: scheduler.loop.locks.CYCLE_LOCK
    lock_ttl_s: float
    lock_hold_max_s: float
    evict_grace_s: float
    move_ready_s: float
    apply_attempts: int
    apply_backoff_s: float
    node_request_timeout_s: float
    simulated_stockout_probability: float


class CheckpointSettings(TypedDict):
    """``CHECKPOINTS``: what the checkpoint interval Microcosm proposes is computed from
    (``jobs/checkpoint_intervals.py``; the rule in ``scheduler/core/rules/checkpointing.py``)."""

    interruptions_per_node_day: dict[str, float]  # capacity tier → interruptions per server and day
    default_cost_s: float
    write_gib_per_s: float
    max_interval_s: float


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

# How long a statement on the embedded SQLite waits for another process's write before giving up (below).
SQLITE_TIMEOUT_S = 15.0
DATABASES = {"default": env_database("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'microcosm.sqlite3'}")}
# Connections are kept for 60 s (env_database); a kept connection that PostgreSQL dropped meanwhile (restart,
# failover, idle timeout) is then noticed and replaced at the start of a request instead of failing it.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # PostgreSQL compiles a query whose estimated cost passes jit_above_cost; the portal's queries are short, so
    # compiling is the cost: a /metrics scrape took 1,070 ms, 1,063 of them JIT (EXPLAIN ANALYZE, bench portal).
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = f"-c jit=off {_options.get('options', '')}".strip()
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded default: the web, the loop's worker and beat write one file at once (RELIABILITY.md, SQLite
    # under its own load). Option names as Django 5.2 reads them (django.db.backends.sqlite3.base,
    # get_connection_params and _start_transaction_under_autocommit):
    # - WAL: readers never wait for the writer, nor the writer for them (https://sqlite.org/wal.html); the mode
    #   is kept in the file. An in-memory database (the tests') answers "memory" and stays as it is.
    #   synchronous=NORMAL is WAL's recommended pairing: durable across a crash of the process, and a commit
    #   no longer waits on an fsync.
    # - timeout: seconds a statement waits for another connection's write lock (sqlite3.connect's busy
    #   handler; Python's default is 5) before "database is locked"; the portal then answers 503
    #   (portal/busy.py). A cycle's record step holds the lock for well under a second.
    # - IMMEDIATE: an atomic block takes the write lock when it begins, where the busy handler waits for it. A
    #   DEFERRED one that read first and then writes cannot wait (SQLite answers SQLITE_BUSY at once rather
    #   than deadlock: https://sqlite.org/lang_transaction.html), the "database is locked" 500s the portal answered.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options.setdefault("init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
    _options.setdefault("timeout", SQLITE_TIMEOUT_S)
    _options.setdefault("transaction_mode", "IMMEDIATE")
REDIS_URL = env_redis_url("REDIS_URL", default="redis://127.0.0.1:6379/0")

# Which cluster the scheduling loop drives: the embedded simulated fleet, or a real Kubernetes cluster.
CLUSTER_BACKEND = env_choice("CLUSTER_BACKEND", ("simulated", "kubernetes"), default="simulated")

# --- The Kubernetes backend (scheduler/gateways/kube/, docs/deploy.md) -----------------------------------------
# Read and checked beside the gateway that uses them (scheduler/gateways/kube/settings.py).
KUBERNETES: KubernetesSettings = kubernetes_settings()
# DCGM exporter metrics for the utilization graphs; empty: no metrics source (the graphs stay empty).
PROMETHEUS_URL = env_str("PROMETHEUS_URL", default="")
if PROMETHEUS_URL and not PROMETHEUS_URL.startswith(("http://", "https://")):
    raise EnvError(f"PROMETHEUS_URL={PROMETHEUS_URL!r} must start with http:// or https:// (http://prometheus:9090).")
# --- end of the Kubernetes backend ----------------------------------------------------------------------------

# The scheduler's tunables, in one place; scheduler/bridge/policy.py turns them into a frozen core Policy.
_SCHEDULER_CYCLE_S = env_int("SCHEDULER_CYCLE_S", default=10, minimum=1, maximum=3600)
SCHEDULER: SchedulerSettings = {
    "cycle_s": _SCHEDULER_CYCLE_S,
    # Reservations and backfill (docs/scheduling-rules.md §5a): how many blocked whole-GPU jobs get one (0: none),
    # and the run time assumed for a job with no duration_s whose team has no history yet.
    "reservation_depth": env_int("SCHEDULER_RESERVATION_DEPTH", default=4, minimum=0, maximum=1000),
    "default_runtime_s": env_float("SCHEDULER_DEFAULT_RUNTIME_S", default=3600.0, minimum=1.0, maximum=31_536_000.0),
    # How many of each team's non-production pending jobs, first in its queue order, may search for work to evict in
    # a cycle (docs/scheduling-rules.md §5, A bounded search); a number above any team's queue lifts the bound.
    "preemption_search_per_team": env_int(
        "SCHEDULER_PREEMPTION_SEARCH_PER_TEAM", default=100, minimum=0, maximum=10_000_000
    ),
    # On-demand capacity for peaks (docs/scheduling-rules.md §9): a waiting job that may use on-demand gets nodes asked
    # of an autoscaled pool once its expected start is later than this; after a request of its fails it asks again
    # this much later; an autoscaled node that held no work this long is released.
    "provision_wait_s": env_float("SCHEDULER_PROVISION_WAIT_S", default=300.0, minimum=0.0, maximum=86400.0),
    "provision_retry_s": env_float("SCHEDULER_PROVISION_RETRY_S", default=900.0, minimum=0.0, maximum=86400.0),
    "release_idle_s": env_float("SCHEDULER_RELEASE_IDLE_S", default=600.0, minimum=0.0, maximum=86400.0),
    "simulated_speed": env_float("SIMULATED_SPEED", default=60.0, minimum=0.001, maximum=1e6),
    # The simulated fleet (durations in virtual seconds): spot interruptions per spot node and virtual hour, their
    # notice (AWS: 2 min, docs/gpu-facts.md, Spot and preemption signals), when a replacement joins, and how long a
    # MIG reconfiguration takes.
    "simulated_interruptions_per_node_hour": env_float(
        "SIMULATED_SPOT_INTERRUPTIONS_PER_HOUR", default=0.2, minimum=0.0, maximum=3600.0
    ),
    "simulated_notice_s": env_float("SIMULATED_SPOT_NOTICE_S", default=120.0, minimum=0.0, maximum=86400.0),
    "simulated_replace_after_s": env_float("SIMULATED_SPOT_REPLACE_S", default=900.0, minimum=0.0, maximum=1e7),
    "simulated_mig_reconfigure_s": env_float("SIMULATED_MIG_RECONFIGURE_S", default=300.0, minimum=0.0, maximum=1e5),
    # How long a simulated checkpointed job takes to save when a spot notice's eviction asks it to (virtual seconds).
    "simulated_checkpoint_cost_s": env_float("SIMULATED_CHECKPOINT_COST_S", default=30.0, minimum=0.0, maximum=1e5),
    # How long a simulated pod takes from its bind to being ready to serve (virtual seconds): what a move waits for.
    "simulated_startup_s": env_float("SIMULATED_STARTUP_S", default=60.0, minimum=0.0, maximum=1e5),
    # The loop: the single-flight lock (redis: REDIS_URL; file: a lock file under var/, one machine only),
    # how long a Redis lock outlives its holder's last renewal (renewed every third of it while a cycle runs; one
    # period by default, so a worker dying mid-cycle costs at most two cycles: scheduler/loop/locks.py), how long
    # a holder may keep renewing before it is taken for hung, the grace an evicted pod gets, apply retries.
    "lock_backend": env_choice("SCHEDULER_LOCK", ("redis", "file"), default="redis"),
    "lock_ttl_s": env_float(
        "SCHEDULER_LOCK_TTL_S", default=float(max(_SCHEDULER_CYCLE_S, 3)), minimum=3.0, maximum=3600.0
    ),
    "lock_hold_max_s": env_float("SCHEDULER_LOCK_HOLD_MAX_S", default=600.0, minimum=10.0, maximum=86400.0),
    "evict_grace_s": env_float("SCHEDULER_EVICT_GRACE_S", default=30.0, minimum=0.0, maximum=3600.0),
    # A move (running work restarted on its right-sized capacity, make-before-break) whose new replicas are not all
    # running and ready this many seconds after they were started is given up: the job keeps its old placement.
    "move_ready_s": env_float("SCHEDULER_MOVE_READY_S", default=600.0, minimum=10.0, maximum=86400.0),
    "apply_attempts": env_int("SCHEDULER_APPLY_ATTEMPTS", default=3, minimum=1, maximum=20),
    "apply_backoff_s": 0.2,
    # A node request (on-demand nodes asked of an autoscaled pool, scheduler/loop/provisioning.py) not provisioned
    # within this many seconds is withdrawn and its job's reason says so; it asks again later.
    "node_request_timeout_s": env_float(
        "SCHEDULER_NODE_REQUEST_TIMEOUT_S", default=1800.0, minimum=60.0, maximum=86400.0
    ),
    # The simulated fleet's autoscaler: the chance a node request finds no capacity (a stockout) and fails.
    "simulated_stockout_probability": env_float(
        "SIMULATED_STOCKOUT_PROBABILITY", default=0.0, minimum=0.0, maximum=1.0
    ),
}
SCHEDULER_LOCK_FILE = VAR_DIR / "scheduler.lock"

# Celery (portal/celery.py): the broker is Redis by default; `make demo` (portal/demo_settings.py) uses kombu's
# filesystem transport under var/celery/ so it needs no server. Results are not kept: tasks report through the
# database and logs.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", default=REDIS_URL)
if CELERY_BROKER_URL.split("://", 1)[0] not in ("redis", "rediss", "unix", "filesystem", "memory"):
    raise EnvError(
        f"CELERY_BROKER_URL={CELERY_BROKER_URL!r} is not supported: use redis://host:6379/0 (production) or "
        "filesystem:// (one machine, no server)."
    )


def filesystem_broker_options(var_dir: Path) -> dict[str, object]:
    """kombu's filesystem transport with every folder under ``var_dir/celery``: messages in ``queue/``,
    processed ones in ``processed/``, and the exchange tables in ``control/`` (kombu's default for that one is
    ``./control``, relative to whatever directory the worker was started in)."""
    celery_dir = var_dir / "celery"
    return {
        "data_folder_in": str(celery_dir / "queue"),
        "data_folder_out": str(celery_dir / "queue"),
        "processed_folder": str(celery_dir / "processed"),
        "control_folder": str(celery_dir / "control"),
        "store_processed": False,
    }


CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_broker_options(VAR_DIR)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "microcosm"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False  # a cycle is not replayed after a worker crash: the next beat runs a fresh one
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
_CYCLE_S = SCHEDULER["cycle_s"]
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # A cycle that has not started within one period is dropped: the next one supersedes it.
    "scheduling-cycle": {"task": "scheduler.cycle_run", "schedule": float(_CYCLE_S), "options": {"expires": _CYCLE_S}},
    "cluster-sync": {"task": "scheduler.cluster_sync", "schedule": 60.0, "options": {"expires": 60}},
    "mig-watch": {"task": "scheduler.mig_watch", "schedule": 15.0, "options": {"expires": 15}},
    "interruptions": {"task": "scheduler.interruptions_handle", "schedule": 5.0, "options": {"expires": 5}},
    "utilization-sample": {"task": "scheduler.utilization_sample", "schedule": 30.0, "options": {"expires": 30}},
    # The ledger closes what is due (docs/billing.md); idempotent, so a late or doubled run is harmless.
    "ledger-close": {"task": "billing.ledger_close", "schedule": 300.0, "options": {"expires": 300}},
}

# Chargeback (billing): idle capacity as its own line or shared back to teams in proportion to their use, and
# whether the finance pages present the figures as charges (chargeback) or for information (showback).
BILLING = {
    "idle_cost": env_choice("BILLING_IDLE_COST", ("own-line", "shared"), default="own-line"),
    "mode": env_choice("BILLING_MODE", ("chargeback", "showback"), default="chargeback"),
}

# The checkpoint interval proposed to a job that sets none: Young's √(2 × cost × MTBF) from each tier's interruption
# rate per server-day (docs/gpu-facts.md, Spot and preemption signals: spot at the Spot Advisor's "> 20 % a month"
# bucket; on-demand and reserved at the hardware failure rate of Meta's Llama 3 run), the job's measured checkpoint
# cost or, before its first checkpoint, the model's training state at the write bandwidth (else a default; both
# assumptions), and a cap for tiers that are hardly ever interrupted.
CHECKPOINTS: CheckpointSettings = {
    "interruptions_per_node_day": {
        "spot": env_float(
            "CHECKPOINT_SPOT_INTERRUPTIONS_PER_DAY",
            default=checkpointing.SPOT_INTERRUPTIONS_PER_NODE_DAY,
            minimum=0.0,
            maximum=1000.0,
        ),
        "on-demand": env_float(
            "CHECKPOINT_ON_DEMAND_INTERRUPTIONS_PER_DAY",
            default=checkpointing.HARDWARE_INTERRUPTIONS_PER_NODE_DAY,
            minimum=0.0,
            maximum=1000.0,
        ),
        "reserved": env_float(
            "CHECKPOINT_RESERVED_INTERRUPTIONS_PER_DAY",
            default=checkpointing.HARDWARE_INTERRUPTIONS_PER_NODE_DAY,
            minimum=0.0,
            maximum=1000.0,
        ),
    },
    "default_cost_s": env_float(
        "CHECKPOINT_DEFAULT_COST_S", default=checkpointing.DEFAULT_COST_S, minimum=0.1, maximum=86_400.0
    ),
    "write_gib_per_s": env_float(
        "CHECKPOINT_WRITE_GIB_PER_S", default=checkpointing.DEFAULT_WRITE_GIB_PER_S, minimum=0.001, maximum=10_000.0
    ),
    "max_interval_s": env_float(
        "CHECKPOINT_MAX_INTERVAL_S", default=checkpointing.DEFAULT_MAX_INTERVAL_S, minimum=60.0, maximum=604_800.0
    ),
}

# Pending jobs one team, and one user, may have at once (jobs.services.job_submit refuses the next with 409):
# a runaway script fills its own queue, not the cluster's.
JOBS = {
    "pending_limit_team": env_int("JOBS_PENDING_LIMIT_TEAM", default=1000, minimum=1),
    "pending_limit_user": env_int("JOBS_PENDING_LIMIT_USER", default=200, minimum=1),
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
    "axes",
    "csp",
    "portal",
    "teams",
    "scheduler",
    "jobs",
    "billing",
    "demo",
    "benchmarks",
    "auditlog",  # before audit: audit's admin replaces auditlog's
    "audit",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A busy or unreachable database answers 503 "busy, try again", not a 500. Outside every middleware that
    # queries (sessions, auth, audit, axes), so that what those raise is answered the same (portal/busy.py).
    "portal.busy.DatabaseBusyMiddleware",
    # Refuses NUL bytes, undecodable query text and oversized bodies before sessions, auth or CSRF read them.
    "portal.request_guard.RequestGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.audit_middleware.AuditMiddleware",  # the signed-in user is the actor of the changes a request makes
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]
if not DEBUG:
    # WhiteNoise serves the collected, hashed assets in production; with DEBUG on, runserver serves them from
    # the source folders and there is nothing collected yet.
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

# The audit trail (audit/, docs/audit.md): a changed team, user or GPU model reads as its name, not its id.
AUDITLOG_USE_FK_STRING_REPRESENTATION = True

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
                "portal.context_processors.navigation",
                "portal.context_processors.simulated_clock",
                "portal.context_processors.sso",
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

# --- Portal pages and the REST API: DRF, drf-spectacular, django-filter, time zones --------------------------
# Kept in one block so the Celery settings beside it can change independently.
INSTALLED_APPS += [
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our own static files, never a CDN
]
# Times are stored in UTC and shown in the browser's time zone, which the page reports in a cookie.
MIDDLEWARE += ["portal.middleware.BrowserTimezoneMiddleware"]
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api_tokens.LastUsedTokenAuthentication",  # DRF's, recording each token's last use
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "jobs.api.errors.exception_handler",
    # JSON with a size, depth, NUL and surrogate guard (jobs/api/parsers.py); forms as DRF reads them.
    "DEFAULT_PARSER_CLASSES": [
        "jobs.api.parsers.GuardedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
# The largest body any page or API call takes (Django's default is 2.5 MB): a bulk cancel of 10,000 job ids is
# about 100 kB. portal/request_guard.py answers a bigger one with 413 before reading it.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1_048_576
SPECTACULAR_SETTINGS = {
    "TITLE": "Microcosm API",
    "DESCRIPTION": "Submit, follow, reprioritise and cancel GPU work; read queues, quotas and the fleet.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobTierEnum": "jobs.api.serializers.JOB_TIER_CHOICES",
        "CapacityTierEnum": "jobs.api.serializers.CAPACITY_TIER_CHOICES",
    },
    # drf-spectacular's enum hook, then every error status each operation can answer (jobs/api/schema.py), then
    # what the job-spec reader accepts in the submit and right-sizing bodies (jobs/api/schema_rules.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "jobs.api.schema.add_error_responses",
        "jobs.api.schema_rules.state_spec_rules",
    ],
}
# --- end of the portal/API block ------------------------------------------------------------------------------

# --- Hardening (docs/security.md): sign-in lockout, API throttles, CSP, what anonymous callers may read -------
# How many reverse proxies in front of the web pods append to X-Forwarded-For. 0: the caller is REMOTE_ADDR
# and the header is ignored (a caller could write anything in it). The lockout and the anonymous throttle
# count per address, so behind an ingress this must be its hop count or every caller shares one address.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", default=0, minimum=0, maximum=5)

# django-axes, three counts each with its own limit (portal/lockout.py; docs/security.md "Sign-in lockout"):
# LOGIN_FAILURE_LIMIT wrong passwords for one username from one address lock that pair (the owner mistyping at
# their desk); LOGIN_ACCOUNT_FAILURE_LIMIT for one username from any addresses lock the account everywhere (a
# guesser rotating addresses); LOGIN_ADDRESS_FAILURE_LIMIT from one address for any usernames lock the address
# (a sprayer trying one password on many accounts). The wider counts have higher limits, so a stranger needs
# four times the guesses to lock an owner out, and an office behind one address many people's typos. Each
# lasts LOGIN_LOCKOUT_MINUTES. Attempts are rows in the database, so every web replica sees the same count; the
# owner unlocks their account from a signed-in session (/accounts/sign-ins/), a platform admin in the admin
# (Axes › Access attempts) or with axes_reset_username / axes_reset_ip. Sign-in pages and the admin go through
# the same backend; the API takes tokens and sessions only, never a password (no oracle there).
LOGIN_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", default=5, minimum=1, maximum=100)
LOGIN_ACCOUNT_FAILURE_LIMIT = env_int("LOGIN_ACCOUNT_FAILURE_LIMIT", default=20, minimum=1, maximum=1000)
LOGIN_ADDRESS_FAILURE_LIMIT = env_int("LOGIN_ADDRESS_FAILURE_LIMIT", default=40, minimum=1, maximum=10000)
LOGIN_LOCKOUT_MINUTES = env_int("LOGIN_LOCKOUT_MINUTES", default=15, minimum=1, maximum=7 * 24 * 60)
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out pair before any password is checked
    "django.contrib.auth.backends.ModelBackend",
]
MIDDLEWARE += ["axes.middleware.AxesMiddleware"]  # last: turns a lockout into the sign-in page saying so
AXES_HANDLER = "portal.lockout.LockoutHandler"  # axes' database handler with one limit per parameter below
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT  # the pair's; the handler scales the two wider counts to it
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username", "ip_address"]  # each locks on its own
AXES_HTTP_RESPONSE_CODE = 429  # axes' default, named here because the lockout page answers with it
AXES_RESET_ON_SUCCESS = True  # a person who mistyped and then got in starts from zero next time (their own rows)
AXES_LOCKOUT_CALLABLE = "portal.views.login_locked_out"
AXES_CLIENT_IP_CALLABLE = "portal.views.client_address"

# Shared state of the API throttles. Each web replica keeps its own memory, so in production the counts live
# in Redis (REDIS_URL) where all replicas see one budget; the embedded default and the tests use memory.
CACHE_BACKEND = env_choice("CACHE_BACKEND", ("redis", "locmem"), default="locmem" if DEBUG else "redis")
# The loop's worker leaves the state its cycle planned in the cache for the submit preview
# (scheduler/bridge/preview_state.py): worth it only where the web processes share the worker's cache (Redis).
PREVIEW_STATE_PUBLISH = CACHE_BACKEND == "redis"
CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    if CACHE_BACKEND == "redis"
    # The throttles keep one key per admission in the last period (portal/rate_counter.py): local memory's
    # default of 300 entries would cull held slots, and a culled slot is one admission too many.
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "OPTIONS": {"MAX_ENTRIES": 100_000}}
}

# DRF throttles: a signed-in caller (session or token: the token acts as its user, and a user has one token)
# gets API_THROTTLE_USER requests per period, an anonymous address API_THROTTLE_ANON; beyond, 429 with
# Retry-After and a JSON detail (jobs/api/errors.py hands Throttled to DRF's handler, which sets both).
# portal/throttles.py: DRF's two throttles, counted atomically (portal/rate_counter.py) and failing open (with
# one log line) while the cache is unreachable.
REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] = [
    "portal.throttles.AnonThrottle",
    "portal.throttles.UserThrottle",
]
REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] = {
    "user": env_rate("API_THROTTLE_USER", default="600/min"),
    "anon": env_rate("API_THROTTLE_ANON", default="60/min"),
    # Checkpoint reports per job (portal.throttles.JobReportThrottle): a gang's replicas may each report the same
    # step at once, and a sane interval is minutes, so 120 a minute is far above any honest job.
    "job_report": env_rate("API_THROTTLE_JOB_REPORT", default="120/min"),
}
# The checkpoint report (jobs/api/checkpoints.py) is throttled per job, not per user: a job's credential is no user.
JOB_REPORT_THROTTLE_CLASSES = ["portal.throttles.JobReportThrottle"]
REST_FRAMEWORK["NUM_PROXIES"] = TRUSTED_PROXY_COUNT  # the anonymous throttle's address, as the lockout's
# Per-user throttles on the pages that cost the most to render (portal/page_throttles.py): the submit form's
# live previews (right-sizing suggestion, checkpoint interval: seconds of CPU each with thousands pending, sent
# as a person types) and the other expensive pages (queue, jobs, dashboards, cluster, billing). Past the rate:
# 429 with Retry-After and a short message that htmx swaps in (static/js/portal.js).
PAGE_THROTTLE_RATES = {
    "preview": env_rate("PAGE_THROTTLE_PREVIEW", default="60/min"),
    "page": env_rate("PAGE_THROTTLE_PAGE", default="60/min"),
}
# After the session and user are read, before the view runs; axes' middleware stays last.
MIDDLEWARE.insert(MIDDLEWARE.index("axes.middleware.AxesMiddleware"), "portal.page_throttles.PageThrottleMiddleware")
# The browsable API is a developer's aid: its forms and the HTML around every response are one more surface
# (and one more page to keep CSP-clean) that production does not need.
REST_FRAMEWORK["DEFAULT_RENDERER_CLASSES"] = ["rest_framework.renderers.JSONRenderer"] + (
    ["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []
)

# The OpenAPI schema and the Swagger UI: public with DEBUG on, behind sign-in otherwise (the schema names
# every endpoint and field, which is a map an outsider need not be handed). portal/views.py reads it per request.
API_SCHEMA_PUBLIC = env_bool("API_SCHEMA_PUBLIC", default=DEBUG)

# Content-Security-Policy (django-csp): scripts only from our own static files (no inline script, no inline
# event handler: templates wire behaviour with data- attributes in static/js/), nothing from other hosts.
# style-src allows 'unsafe-inline' on purpose: plotly.js inserts <style> elements while drawing and positions
# its SVG with style attributes, Swagger UI sets styles inline, and our templates size bars and colour cluster
# slices with style="width: …%"/"background: …" computed on the server. Inline style cannot run code; the
# script policy is what stops an injected script.
MIDDLEWARE.insert(MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1, "csp.middleware.CSPMiddleware")
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],  # Swagger UI's and plotly's icons are data: URIs
        "font-src": [SELF],
        "connect-src": [SELF],  # htmx and Swagger UI call back to the portal only
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}
# /metrics (portal/metrics, docs/metrics.md) is closed by default: with METRICS_TOKEN set, a scrape must send it
# as a bearer token; with METRICS_PUBLIC on (and no token), anyone who reaches the portal reads it; with neither,
# it answers 404. Prometheus scrapes inside the cluster over plain HTTP, so the HTTPS redirect spares this one
# path (the token then crosses the cluster network unencrypted).
METRICS_TOKEN = env_str("METRICS_TOKEN", default="")
METRICS_PUBLIC = env_bool("METRICS_PUBLIC", default=False)
if METRICS_TOKEN and len(METRICS_TOKEN) < 32:
    raise EnvError(
        "METRICS_TOKEN must be at least 32 characters; generate one with "
        "python -c 'import secrets; print(secrets.token_urlsafe(32))'."
    )
if METRICS_TOKEN and METRICS_PUBLIC:
    raise EnvError(
        "METRICS_TOKEN and METRICS_PUBLIC both set: /metrics either needs the token or is open to anyone; "
        "unset METRICS_PUBLIC to keep the token, or unset METRICS_TOKEN to open it."
    )
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
# --- end of hardening -----------------------------------------------------------------------------------------

# --- Single sign-on with OpenID Connect (portal/sso/, docs/security.md, Single sign-on) ------------------------
# On when OIDC_ISSUER is set. mozilla-django-oidc does the code flow (with PKCE and a nonce); portal/sso checks
# the ID token's issuer and audience, names users by (issuer, sub) and recomputes their teams and roles from the
# groups claim (teams/sso.py). Endpoints are the issuer's discovery document's unless set one by one. Local
# password accounts keep working beside it (admins, break-glass), with the lockout above.
OIDC_ISSUER = env_str("OIDC_ISSUER", default="").rstrip("/")
SSO_ENABLED = bool(OIDC_ISSUER)
SSO_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", default="single sign-on")  # the button: "Sign in with …"
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET", default="")
OIDC_RP_SCOPES = " ".join(env_list("OIDC_SCOPES", default=["openid", "email", "profile", "groups"]))
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", default="groups")
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", default="preferred_username")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_USERINFO_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_JWKS_URI", default="")
OIDC_RP_SIGN_ALGO = env_choice("OIDC_SIGN_ALGO", ("RS256", "ES256", "PS256"), default="RS256")
# client_secret_basic is the token endpoint's default client authentication (OIDC Core 1.0 §9).
OIDC_TOKEN_USE_BASIC_AUTH = (
    env_choice("OIDC_TOKEN_AUTH", ("client_secret_basic", "client_secret_post"), default="client_secret_basic")
    == "client_secret_basic"
)
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT_S", default=10, minimum=1, maximum=120)
if SSO_ENABLED:
    _loopback = re.match(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", OIDC_ISSUER)
    if not (OIDC_ISSUER.startswith("https://") or _loopback):
        raise EnvError(f"OIDC_ISSUER={OIDC_ISSUER!r} must be an https:// URL (http:// only on loopback, for tests).")
    if not (OIDC_RP_CLIENT_ID and OIDC_RP_CLIENT_SECRET):
        raise EnvError("OIDC_CLIENT_ID and OIDC_CLIENT_SECRET must be set when OIDC_ISSUER is.")
    if "openid" not in OIDC_RP_SCOPES.split():
        raise EnvError(f"OIDC_SCOPES={OIDC_RP_SCOPES!r} must include openid.")
# --- end of single sign-on ------------------------------------------------------------------------------------

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

# Log lines: JSON objects (one per line, with job/team/node/cycle fields where they apply) for a log pipeline,
# or plain readable lines for a terminal; plain by default with DEBUG on, so the demo reads as text
# (portal/log_formats.py, docs/deploy.md, Logs).
LOG_FORMAT = env_choice("LOG_FORMAT", ("json", "plain"), default="plain" if DEBUG else "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": log_formatters(),
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {
        "handlers": ["console"],
        "level": env_choice("LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO"),
    },
    # django-axes logs failures and lockouts as warnings, and at INFO several lines for every sign-in (those
    # are rows in the admin's access log anyway).
    "filters": {"forbidden_on_one_line": {"()": "portal.log_filters.ForbiddenOnOneLine"}},
    "loggers": {
        "axes": {"level": "WARNING"},
        # A 403 is one line (path and reason), not a traceback: see portal.log_filters.
        "django.request": {"filters": ["forbidden_on_one_line"]},
    },
}
