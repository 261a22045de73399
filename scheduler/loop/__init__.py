"""The scheduling loop (DESIGN.md §1): one cycle observes the cluster through a gateway, reconciles the
database with it, builds the engine's snapshot, plans, records the plan and applies it.

``cycle`` runs one cycle; ``reconcile`` repairs what the cluster and the database disagree on, and ``notice`` is
its handling of spot notices (drain, checkpoint, requeue); ``record`` writes decisions before they are applied;
``apply`` carries them out; ``cordons`` carries admins' cordons to the cluster; ``locks`` keeps one cycle in
flight; ``stats`` adds each cycle to the loop's totals; ``cycle_log`` logs each cycle. What the loop shares with
the apps (the snapshot, the policy, the preview, the outage guard, the names it records under) is the bridge's
(:mod:`scheduler.bridge`): nothing outside the scheduler app imports the loop.
"""
