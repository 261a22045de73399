"""The demo behind ``make demo``: a seeded organisation, fleet and billing history, and a stream of jobs.

An app of its own because it uses every other app's services (teams, jobs, scheduler, billing) the way a
customer would; the portal, which composes the apps, starts it (``manage.py demo``, ``portal/demo_settings.py``).
"""
