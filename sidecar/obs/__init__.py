"""Observability: the Prometheus metrics and the structured logs (low-level tools that
every layer above may use; they depend only on ``sidecar.labels`` and ``detectors``)."""
