"""The Kubernetes gateway: ``gateway`` (what the loop calls), ``client`` (the only module importing
``kubernetes``), ``mig_flow`` (the MIG relabel flow the gateway holds) and the pure rules it applies to the API's
JSON: ``labels``, ``nodes``, ``pods``, ``mig`` (the flow's states) and ``prometheus`` (utilization readings).

Nothing is imported here, so the pure modules load without the ``kubernetes`` package.
"""
