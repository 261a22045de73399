"""The audit trail: who changed what the platform runs on, when, and from what to what.

Quotas, prices (the price catalog, node prices), reserved commitments, teams and their settings, projects,
memberships and roles (team roles and the org-wide groups), and node state (cordon, drain) are recorded on
every change, through django-auditlog: one ``auditlog.LogEntry`` per saved or deleted row, with the fields it
changed as before → after. The actor is the signed-in user for changes made over the web (the admin, the
portal), the ``--actor`` of ``manage.py teams apply`` (or no user, marked as ``teams apply``), and no user for
the scheduler's own writes. Jobs are not here: their changes are job events (``jobs.models.JobEvent``).

Platform admins read the trail in the admin (Audit trail › Log entries) and download it as CSV from there, with
the page's filters (docs/audit.md).
"""
