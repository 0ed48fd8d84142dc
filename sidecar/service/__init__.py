"""Running the sidecar: the app factory, server lifecycle and workers, the CLI, demo and
replay, and observability (metrics, logs, health, systemd notification)."""
