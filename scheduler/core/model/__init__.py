"""The model: the values the engine is given, works on and gives back. The words the job spec, the database and the API
share (``vocabulary``), the frozen snapshot (``state``) and ``policy``, a right-sized ``demand`` and a job's ``shape``,
the cluster as one cycle changes it (``capacity``), the ``plan`` a cycle decides and the words of a waiting reason
(``explain``), one job's failure kept its own (``isolation``), and the cache tables the cycle hands to the rules. It
imports only the GPU catalog (``scheduler/core/gpus/``)."""
