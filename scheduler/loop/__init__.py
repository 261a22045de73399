"""The scheduling loop (DESIGN.md §1): one cycle observes the cluster through a gateway, reconciles the
database with it, builds the engine's snapshot, plans, records the plan and applies it.

``cycle`` runs one cycle; ``snapshot`` builds the engine's input; ``reconcile`` repairs what the cluster and
the database disagree on, and ``notice`` is its handling of spot notices (drain, checkpoint, requeue);
``record`` writes decisions before they are applied; ``apply`` carries them out; ``locks`` keeps one cycle in
flight; ``outage`` rides out Redis, database and cluster outages; ``policy`` reads ``settings.SCHEDULER`` into
the engine's policy.
"""
