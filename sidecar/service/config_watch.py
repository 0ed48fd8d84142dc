"""Reload when the config file changes: the ``config_watch_seconds`` poller of ``serve``.

Kubernetes mounts a ConfigMap as a directory of symlinks: ``sidecar.toml`` ->
``..data/sidecar.toml`` and ``..data`` -> ``..2024_05_01_12_00_00.123456789``. The kubelet
applies an update by writing a new timestamped directory, pointing a new symlink at it
and renaming that over ``..data``: the file behind the mounted path is replaced without
a single write to it. An inotify watch on the path follows the old inode and misses it,
so this module polls instead. Every ``interval`` it takes the file's :class:`Stamp` (the
path with every symlink resolved, and the device, inode, size, mtime and ctime of what it
points to) and calls ``on_change`` when the stamp differs from the last one seen. That
catches the kubelet's swap (new target, new inode), an editor's rename-over, and an
in-place write alike. A poll is one ``realpath`` and one ``stat``.

A file that cannot be read (deleted, or a broken link) is logged once and changes
nothing: the config in force stays until a readable file appears. ``on_change`` is the
same reload as SIGHUP (``sidecar.service.server``), which refuses a file that does not
load and keeps the old config. Every reload, SIGHUP's included, calls
:meth:`WatchedFile.mark` first, so a file reloaded by a signal is not reloaded a second
time by the next poll.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

__all__ = ["Stamp", "WatchedFile", "stamp", "watch"]

log = structlog.get_logger("runaway_sidecar")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What identifies one version of a file; taken by :func:`stamp` at each poll."""

    target: str  # the path with every symlink resolved
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


def stamp(path: Path) -> Stamp | None:
    """The current :class:`Stamp` of ``path`` (symlinks followed), or ``None`` when it
    cannot be read."""
    try:
        target = os.path.realpath(path)
        st = os.stat(target)
    except OSError:
        return None
    return Stamp(target, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class WatchedFile:
    """The config file and the stamp of the version last loaded."""

    __slots__ = ("missing", "path", "seen")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = stamp(path)
        self.missing = False

    def mark(self) -> None:
        """Record the file as it is now: called just before every reload reads it."""
        self.seen = stamp(self.path)

    def changed(self) -> Stamp | None:
        """The file's new stamp if it differs from the version last marked, else
        ``None``; logs a file that cannot be read (once, until it can again)."""
        now = stamp(self.path)
        if now is None:
            if not self.missing:
                log.warning("config_file_unreadable", path=str(self.path))
            self.missing = True
            return None
        self.missing = False
        return now if now != self.seen else None


async def watch(file: WatchedFile, interval: float, on_change: Callable[[], None]) -> None:
    """Poll ``file`` every ``interval`` seconds and call ``on_change`` (which must call
    ``file.mark()``) after each change; runs until cancelled."""
    while True:
        await asyncio.sleep(interval)
        new = file.changed()
        if new is not None:
            log.info("config_file_changed", path=str(file.path), target=new.target)
            on_change()
