"""The cycle, the engine's top floor: ``plan_cycle`` (``cycle``), its ordered steps and the run they share, and the
questions answered by planning a cycle, a job's ``preview`` and the ``queue``'s order between cycles. It may import
every floor beneath it; only the engine's public API (``scheduler/core/__init__.py``) imports it."""
