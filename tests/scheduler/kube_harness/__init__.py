"""Real components' behaviours for the Kubernetes emulator (tests/scheduler/kube_emulator.py), one module each."""
