"""Writing trace records off the event loop: a bounded queue drained by one thread.

:meth:`Writer.submit` never blocks: it puts a capture on the queue, or, when the queue is
full (the disk is slower than the records come), drops it and counts it. The thread turns
each capture into its JSON line and appends it to the current trace file of the
directory, through a :class:`Disk`:

- rotation: a file is closed once the next line would take it past ``file_bytes`` (a line
  larger than that is dropped and counted), and the next one is named
  ``traces-<UTC time>-<pid>-<n>.jsonl``, so names sort oldest first and the workers of
  one node never share a file;
- size cap: after each write, the oldest trace files go while all of them (the other
  workers' too) hold more than ``max_bytes``; the current file is kept, so with
  ``max_bytes`` at least twice ``file_bytes`` the directory never holds more. A worker
  whose current file another worker deleted starts a new one;
- a write the disk refuses is dropped and counted; the next record starts a new file.

Only ``traces-*.jsonl`` files are counted or deleted: labels written beside them stay.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import structlog

from sidecar.obs.metrics import Metrics
from sidecar.traces.record import Capture

log = structlog.get_logger("runaway_sidecar")

PREFIX = "traces-"
SUFFIX = ".jsonl"


class Disk(Protocol):
    """The file operations of one record directory (tests pass a slow fake)."""

    def listing(self) -> list[tuple[str, int]]:
        """The trace files' names and sizes, oldest first."""
        ...

    def open(self, name: str) -> None:
        """Make ``name`` the file :meth:`append` writes to (closing the previous one)."""
        ...

    def append(self, data: bytes) -> None:
        """Append ``data`` to the open file (raises ``OSError`` when the disk refuses)."""
        ...

    def gone(self) -> bool:
        """The open file was deleted (by another worker's size cap)."""
        ...

    def remove(self, name: str) -> None:
        """Delete a trace file (one already gone is no error)."""
        ...

    def close(self) -> None:
        """Close the open file, if any."""
        ...


class LocalDisk:
    """A record directory on the local file system, created if missing."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(f"cannot write to {directory}")
        self.directory = directory
        self._fd: int | None = None

    def listing(self) -> list[tuple[str, int]]:
        """See :class:`Disk`."""
        found = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.startswith(PREFIX) and entry.name.endswith(SUFFIX):
                    try:
                        found.append((entry.name, entry.stat().st_size))
                    except FileNotFoundError:
                        continue
        return sorted(found)

    def open(self, name: str) -> None:
        """See :class:`Disk`."""
        self.close()
        self._fd = os.open(self.directory / name,
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)

    def append(self, data: bytes) -> None:
        """See :class:`Disk`."""
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def gone(self) -> bool:
        """See :class:`Disk`."""
        return self._fd is not None and os.fstat(self._fd).st_nlink == 0

    def remove(self, name: str) -> None:
        """See :class:`Disk`."""
        (self.directory / name).unlink(missing_ok=True)

    def close(self) -> None:
        """See :class:`Disk`."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_STOP = object()


class Writer:
    """The record directory's writer thread (see the module docstring)."""

    def __init__(self, disk: Disk, metrics: Metrics, *, file_bytes: int, max_bytes: int,
                 queue_size: int, clock: Callable[[], float] = time.time) -> None:
        self._disk = disk
        self._metrics = metrics
        self._file_bytes = file_bytes
        self._max_bytes = max_bytes
        self._clock = clock
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._current: str | None = None
        self._size = 0
        self._files = 0
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="runaway-sidecar-record",
                                        daemon=True)
        self._thread.start()

    def submit(self, capture: Capture) -> bool:
        """Queue ``capture`` for writing; False (counted) when the queue is full."""
        try:
            self._queue.put_nowait(capture)
        except queue.Full:
            self._metrics.record_dropped("queue_full")
            return False
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Write what is queued (for at most ``timeout`` seconds) and stop the thread;
        False when the disk did not keep up (what was left is lost)."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def join(self) -> None:
        """Wait until every queued capture has been handled (tests)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    self._disk.close()
                    return
                assert isinstance(item, Capture)
                self._write(item)
            finally:
                self._queue.task_done()

    def _write(self, capture: Capture) -> None:
        line = capture.line()
        if len(line) > self._file_bytes:
            self._metrics.record_dropped("too_large")
            return
        disk = self._disk
        try:
            if (self._current is None or disk.gone()
                    or (self._size and self._size + len(line) > self._file_bytes)):
                self._rotate()
            disk.append(line)
        except OSError as exc:
            self._metrics.record_dropped("write_error")
            if not self._failing:  # once per run of failures, not per record
                log.warning("record_write_failed", error=str(exc))
            self._failing = True
            self._current = None  # the next record starts a new file
            return
        self._failing = False
        self._size += len(line)
        self._metrics.record_written(capture.kind, len(line))
        self._cap()

    def _rotate(self) -> None:
        """Open the next trace file."""
        self._files += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
        self._current = f"{PREFIX}{stamp}-{os.getpid()}-{self._files:04d}{SUFFIX}"
        self._disk.open(self._current)
        self._size = 0

    def _cap(self) -> None:
        """Delete the oldest trace files while all of them hold more than ``max_bytes``."""
        try:
            files = self._disk.listing()
            total = sum(size for _, size in files)
            for name, size in files:
                if total <= self._max_bytes:
                    break
                if name == self._current:
                    continue
                self._disk.remove(name)
                self._metrics.record_file_removed()
                total -= size
        except OSError as exc:
            log.warning("record_cap_failed", error=str(exc))
