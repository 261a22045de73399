"""Decisions: what a cycle decides for one job from placement and the rules. The placement a job takes with its team's
quota (``choose``), the fewest running jobs to evict to make room (``preemption``), reservations and backfill
(``reservation``), and which jobs a cycle rejects before placing anything (``screening``). Decisions import placement,
the rules, sizing, the model and the GPU catalog; the speed-ups wrap them and the cycle calls them."""
