"""Behaviours of real Kubernetes components the emulator lacks, one module each, registered by the tests that need
them through the emulator's ``interceptors`` and ``bind_hooks`` (tests/scheduler/kube_emulator.py)."""
