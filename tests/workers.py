"""What keeps pytest-xdist's workers apart (``make test`` runs the suite in two): each worker's own Redis database.

pytest-django already gives each worker (``gw0``, ``gw1``, …) a test database of its own, and ``tmp_path`` a
folder of its own; ports are picked free and keys carry a test's own prefix. What the workers would still share
is the Redis database of ``REDIS_URL``: Celery's default queue, the loop's lock name and kombu's bookkeeping keys
(which ``tests/scheduler/redis_helpers.py`` removes after a test). So worker ``gwN`` uses the database N below
``REDIS_URL``'s (modulo Redis's 16), on the same server: CI's 15 for ``gw0``, 14 for ``gw1``."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDIS_DATABASES = 16  # a Redis server's default number of databases


def worker_number(worker: str) -> int:
    """``gw3`` → 3: the name pytest-xdist gives a worker (``PYTEST_XDIST_WORKER``)."""
    return int(worker.removeprefix("gw"))


def redis_url_of_worker(url: str, worker: str) -> str:
    """The same server, the database ``worker_number(worker)`` below the URL's: in the path of ``redis://`` and
    ``rediss://`` URLs, in the ``db`` query parameter of ``unix://`` ones (0 when the URL names none)."""
    parts = urlsplit(url)
    shift = worker_number(worker)
    if parts.scheme == "unix":
        query = dict(parse_qsl(parts.query))
        query["db"] = str((int(query.get("db", "0")) - shift) % REDIS_DATABASES)
        # Written out: urlunsplit drops the "//" of a URL with no host.
        return f"unix://{parts.netloc}{parts.path}?{urlencode(query)}"
    database = int(parts.path.strip("/") or "0")
    return urlunsplit(parts._replace(path=f"/{(database - shift) % REDIS_DATABASES}"))
