"""The text exposition of ``/metrics``, single-process or merged across workers.

Multiprocess mode (``serve --workers N``): prometheus_client picks its value store when
it is first imported, from ``PROMETHEUS_MULTIPROC_DIR``. The variable must therefore be
set before the worker processes start (the supervisor sets it and empties the
directory), and :func:`exposition` then merges the per-process files. When a worker
exits, the supervisor calls :func:`mark_worker_dead` so the live gauges drop its share.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, values
from prometheus_client import multiprocess as _mp

__all__ = ["exposition", "mark_worker_dead", "multiprocess_dir"]


def multiprocess_dir() -> str | None:
    """The multiprocess directory in force, or ``None`` in single-process mode.

    Raises :class:`RuntimeError` when ``PROMETHEUS_MULTIPROC_DIR`` is set but
    prometheus_client was imported before it was: the workers would then count in
    private memory and ``/metrics`` would silently show nothing.
    """
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        return None
    if not getattr(values.ValueClass, "_multiprocess", False):
        raise RuntimeError(
            "PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported; "
            "set it in the environment before the worker processes start"
        )
    return path


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """Render the text exposition and its content type.

    Single-process: ``registry`` as is. Multiprocess: the merged files of every
    worker (``registry`` is ignored there, since each worker holds only its own share).
    """
    path = multiprocess_dir()
    if path is None:
        return generate_latest(registry), CONTENT_TYPE_LATEST
    merged = CollectorRegistry()
    # prometheus_client ships these two functions without annotations.
    _mp.MultiProcessCollector(merged, path=path)  # type: ignore[no-untyped-call]
    return generate_latest(merged), CONTENT_TYPE_LATEST


def mark_worker_dead(pid: int) -> None:
    """Drop the live-gauge files of an exited worker (no-op in single-process mode)."""
    path = multiprocess_dir()
    if path is not None:
        _mp.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
