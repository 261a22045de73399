"""Settings for the test suite: the production settings module with development defaults.

Only defaults are set, so CI's DATABASE_URL and REDIS_URL still choose PostgreSQL and Redis.
"""

import os

os.environ.setdefault("DEBUG", "1")

from portal.settings import *  # noqa: F403

# Hashing demo-strength passwords with PBKDF2 dominates a suite that logs users in; MD5 is fine for tests.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
