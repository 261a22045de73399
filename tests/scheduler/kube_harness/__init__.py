"""Real cluster components' behaviour for the Kubernetes emulator (tests/scheduler/kube_emulator.py), one module
each, modelled on their upstream source and registered on a ``Cluster`` by a fixture."""
