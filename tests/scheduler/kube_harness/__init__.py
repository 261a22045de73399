"""The real components around the Kubernetes API server that the emulator lacks, one module each (admission
plugins, webhooks, kubelets...), plugged in as :data:`tests.scheduler.kube_emulator.Interceptor` s or bind hooks.
Each behaviour cites the upstream source it follows."""
