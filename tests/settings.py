"""Settings for the test suite: the production settings module with development defaults.

Only defaults are set, so CI's DATABASE_URL and REDIS_URL still choose PostgreSQL and Redis.
"""

import os

os.environ.setdefault("DEBUG", "1")

# Under pytest-xdist each worker takes a Redis database of its own (tests/workers.py). Set in the environment, so
# that the subprocesses a worker starts (Celery workers, the loop) inherit the same one; the second variable
# records that it was set, so that such a subprocess, reading these settings too, does not move it again.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("MICROCOSM_TEST_REDIS_WORKER") != _worker:
    from tests.workers import redis_url_of_worker

    # The default is portal/settings.py's own (a Redis on this machine, database 0).
    os.environ["REDIS_URL"] = redis_url_of_worker(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), _worker)
    os.environ["MICROCOSM_TEST_REDIS_WORKER"] = _worker

from portal.settings import *  # noqa: E402, F403

# Hashing demo-strength passwords with PBKDF2 dominates a suite that logs users in; MD5 is fine for tests.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
