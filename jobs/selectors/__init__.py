"""The jobs app's reads, one module per concept (HackSoft selectors: they read, the services in ``jobs/services/``
write). Every read that takes a user is scoped to what that user may see.

- :mod:`jobs.selectors.jobs`: jobs, their events, allocations and usage, scoped to the requesting user.
- :mod:`jobs.selectors.team_usage`: a team's quota use, dashboard and utilization series.
- :mod:`jobs.selectors.waiting`, :mod:`jobs.selectors.timeline`: what a waiting job and a job event read as.
- :mod:`jobs.selectors.preemptions`: who preempted a job, as its viewer may see it.
- :mod:`jobs.selectors.network`: a job's network as its team sees it.
- :mod:`jobs.selectors.rightsizing`: what a job would get now, from the engine.
- :mod:`jobs.selectors.logs`: a job's replica logs, read through the gateway and bounded.
"""
