"""A CPU quota per process, through a Linux cgroup of its own (``workers --cpu-quota``).

On a machine whose cores the load generator and the simulator share with the proxy, two
proxy workers never get two free cores, so the load they hold says more about the rig than
about the workers. Giving every serving process the same quota (a fraction of one CPU,
enforced by the kernel's CFS bandwidth control) stands in for "one core each" at a size
the rig can feed: one worker gets ``F`` of a CPU, two workers get ``F`` each.

cgroup v1 (a ``cpu`` hierarchy with ``cpu.cfs_quota_us``) and v2 (``cpu.max``) both work.
Needs permission to create cgroups (root, or a delegated subtree); :func:`limited` raises
:class:`QuotaUnavailable` saying what is missing otherwise. Each process goes back to the
cgroup it came from, and the cgroups are removed, when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

#: The CFS period. Short, so a throttled process waits milliseconds, not a tenth of a
#: second, for its next slice (what a latency measurement would otherwise see).
PERIOD_US = 10_000
_V1 = Path("/sys/fs/cgroup/cpu")
_V2 = Path("/sys/fs/cgroup")


class QuotaUnavailable(RuntimeError):
    """This machine (or this user) cannot put a process under a CPU quota."""


def _home(pid: int) -> tuple[Path, str]:
    """The cgroup directory ``pid`` is in now, and the file that sets a quota there."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") and (_V1 / "cpu.cfs_quota_us").exists():
            return _V1 / path.lstrip("/"), "cpu.cfs_quota_us"
        if controllers == "" and (_V2 / "cgroup.controllers").exists():
            return _V2 / path.lstrip("/"), "cpu.max"
    raise QuotaUnavailable("no cgroup cpu controller found (v1 cpu hierarchy or v2 cpu.max)")


def _set_quota(group: Path, knob: str, fraction: float) -> None:
    quota = max(1000, round(fraction * PERIOD_US))
    if knob == "cpu.max":
        (group / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
    else:
        (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{quota}\n")


@contextlib.contextmanager
def limited(pids: list[int], fraction: float) -> Iterator[None]:
    """Hold each of ``pids`` (with all its threads) to ``fraction`` of one CPU, each in a
    cgroup of its own, for the duration of the ``with`` block."""
    if not 0 < fraction <= 64:
        raise ValueError(f"CPU quota must be a positive fraction of a CPU, got {fraction}")
    moved: list[tuple[int, Path, Path]] = []  # pid, its own cgroup, where it came from
    try:
        for pid in pids:
            home, knob = _home(pid)
            group = home / f"runaway-bench-{pid}"
            try:
                group.mkdir()
                _set_quota(group, knob, fraction)
                (group / "cgroup.procs").write_text(f"{pid}\n")
            except OSError as exc:
                with contextlib.suppress(OSError):
                    group.rmdir()
                if isinstance(exc, PermissionError):
                    raise QuotaUnavailable(f"cannot create a cgroup in {home} ({exc.strerror}); "
                                           "run as root or in a delegated cgroup") from exc
                raise QuotaUnavailable(f"cannot set a CPU quota in {group}: {exc}") from exc
            moved.append((pid, group, home))
        yield
    finally:
        for pid, group, home in moved:
            with contextlib.suppress(ProcessLookupError, OSError):
                os.kill(pid, 0)
                (home / "cgroup.procs").write_text(f"{pid}\n")
            with contextlib.suppress(OSError):
                group.rmdir()


def throttled_seconds(pid: int) -> float:
    """How long the quota held ``pid``'s cgroup back so far (0 if it has none)."""
    home, _ = _home(pid)
    stat = home / "cpu.stat"
    if not stat.exists():
        return 0.0
    for line in stat.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == "throttled_time":  # v1, nanoseconds
            return int(value) / 1e9
        if name == "throttled_usec":  # v2
            return int(value) / 1e6
    return 0.0
