"""The jobs app's pages (namespace ``jobs``): the views, their forms and URLs, and what the jobs list and a job's
page show; the templates are in ``templates/jobs/``. They read through ``jobs/selectors/`` and write through
``jobs/services/``."""
