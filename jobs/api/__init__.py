"""The jobs' part of the REST API under /api/v1/ (jobs, queue, right-sizing, a job's checkpoint reports), and what
the whole API shares: authentication, parsers, permissions, errors and the schema rules. The teams' and the
cluster's parts live in their apps (``teams/api/``, ``scheduler/api/``); ``portal/api_urls.py`` routes them all."""
