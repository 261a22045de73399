"""Real components' behaviour for the Kubernetes emulator (``tests/scheduler/kube_emulator.py``), one module each,
each modelled on its upstream source and citing it."""
