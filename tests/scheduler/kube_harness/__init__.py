"""The real components around the Kubernetes API, as the tests' cluster runs them: one module per component (the
GPU Operator's MIG Manager, the device plugin, the API server's admission and graceful delete, ...), each behaviour
traced to its upstream source in a comment, registered on :class:`tests.scheduler.kube_emulator.GatewayEmulator`
through its interceptors and bind hooks."""
