"""The bridge between the database and the engine, beneath both the apps and the loop: what the apps read of the
fleet and ask the engine, and what the loop shares with them.

``snapshot`` builds the engine's input from the database rows and an observation; ``policy`` reads
``settings.SCHEDULER`` into the engine's policy; ``preview`` answers what the engine would do with a job not
submitted yet; ``outage`` rides out Redis, database and cluster outages for the loop and every periodic task;
``cycle_stats`` names what the loop's totals hold; ``vocabulary`` holds the names the loop records under.

The loop (:mod:`scheduler.loop`) records through the job services, so the bridge imports neither the loop nor any
module that leads back to it, and no app imports the loop: ``tests/test_boundaries.py`` checks both.
"""
