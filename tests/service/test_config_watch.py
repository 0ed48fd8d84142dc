"""The config file watcher: a ConfigMap update, made the way the kubelet makes it, reloads
the served config without a restart; in-place edits too; unreadable files change nothing."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from sidecar.service.config_watch import WatchedFile, stamp, watch
from tests.service.test_lifecycle import free_port, wait_port
from tests.stack import sample_sum

_VERSIONS = itertools.count(1)


def kubelet_update(mount: Path, files: dict[str, str]) -> None:
    """Publish ``files`` in ``mount`` as the kubelet's atomic writer publishes a ConfigMap
    volume: a new timestamped directory, a ``..data_tmp`` symlink to it renamed over
    ``..data``, the user-visible ``NAME -> ..data/NAME`` links, then the old directory
    removed."""
    mount.mkdir(exist_ok=True)
    data = mount / "..data"
    old = os.readlink(data) if data.is_symlink() else None
    version = mount / time.strftime(f"..%Y_%m_%d_%H_%M_%S.{next(_VERSIONS):09d}")
    version.mkdir()
    for name, text in files.items():
        (version / name).write_text(text)
    tmp = mount / "..data_tmp"
    tmp.symlink_to(version.name)
    os.replace(tmp, data)
    for name in files:
        link = mount / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")
    if old is not None:
        shutil.rmtree(mount / old)


def test_kubelet_swap_is_a_change(tmp_path: Path) -> None:
    """A new ``..data`` target is a change even when the new file has the old one's size
    and mtime: the resolved path and inode differ."""
    kubelet_update(tmp_path, {"sidecar.toml": 'mode = "enforce"\n'})
    path = tmp_path / "sidecar.toml"
    watched = WatchedFile(path)
    assert watched.changed() is None
    old = watched.seen
    assert old is not None
    before = os.stat(path)
    kubelet_update(tmp_path, {"sidecar.toml": 'mode = "shadow!"\n'})  # same length
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    new = watched.changed()
    assert new is not None
    assert new.target == os.path.realpath(path) != old.target
    assert Path(new.target).parent.name.startswith("..")
    assert new.size == before.st_size
    assert new.mtime_ns == before.st_mtime_ns
    watched.mark()
    assert watched.changed() is None


def test_in_place_edit_and_rename_over_are_changes(tmp_path: Path) -> None:
    """A write to the file itself and an editor's write-then-rename are changes too."""
    path = tmp_path / "gpu0.toml"
    path.write_text('mode = "enforce"\n')
    watched = WatchedFile(path)
    path.write_text('mode = "shadow"\n')
    assert watched.changed() is not None
    watched.mark()
    (tmp_path / "gpu0.toml.new").write_text('mode = "cut"\n')
    os.replace(tmp_path / "gpu0.toml.new", path)
    assert watched.changed() is not None


def test_unreadable_file_is_no_change_until_it_is_back(tmp_path: Path) -> None:
    """A deleted file (or a dangling link) keeps the config in force; its return is a
    change."""
    path = tmp_path / "gpu0.toml"
    path.write_text('mode = "enforce"\n')
    watched = WatchedFile(path)
    path.unlink()
    assert stamp(path) is None
    assert watched.changed() is None
    assert watched.missing
    path.write_text('mode = "shadow"\n')
    assert watched.changed() is not None
    assert not watched.missing


async def test_watch_calls_back_once_per_change(tmp_path: Path) -> None:
    """The poller calls ``on_change`` once for each published version, not per poll."""
    kubelet_update(tmp_path, {"sidecar.toml": "a = 1\n"})
    watched = WatchedFile(tmp_path / "sidecar.toml")
    calls: list[str] = []

    def on_change() -> None:
        watched.mark()
        calls.append((tmp_path / "sidecar.toml").read_text())

    task = asyncio.create_task(watch(watched, 0.01, on_change))
    try:
        await asyncio.sleep(0.1)
        assert calls == []
        kubelet_update(tmp_path, {"sidecar.toml": "a = 2\n"})
        await asyncio.sleep(0.1)
        kubelet_update(tmp_path, {"sidecar.toml": "a = 3\n"})
        await asyncio.sleep(0.1)
    finally:
        task.cancel()
    assert calls == ["a = 2\n", "a = 3\n"]


# ---------------------------------------------------------------- the served process

LOOP = {"model": "sim-loop", "max_tokens": 400, "stream": True,
        "messages": [{"role": "user", "content": "fix it"}]}


class Mounted:
    """A simulator and ``serve --config MOUNT/sidecar.toml``, the file published in a
    kubelet-style volume and watched every 0.1 s."""

    def __init__(self, tmp: Path) -> None:
        self.mount = tmp / "config"
        self.log = tmp / "sidecar.log"
        self.sim_port, self.port, self.mport = free_port(), free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    def publish(self, text: str) -> None:
        kubelet_update(self.mount, {"sidecar.toml": (
            f'upstream = "http://127.0.0.1:{self.sim_port}"\n'
            f'listen = "127.0.0.1:{self.port}"\nmetrics_listen = "127.0.0.1:{self.mport}"\n'
            "config_watch_seconds = 0.1\n" + text)})

    def start(self) -> None:
        sim = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "simulate", "--listen",
             f"127.0.0.1:{self.sim_port}", "--tokens-per-second", "400"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(sim)
        wait_port(self.sim_port, sim)
        with self.log.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sidecar", "serve", "--config",
                 str(self.mount / "sidecar.toml")], stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        wait_port(self.port, proc)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def events(self, name: str) -> list[dict[str, object]]:
        return [e for e in map(orjson.loads, self.log.read_bytes().splitlines())
                if e.get("event") == name]

    async def metric(self, name: str, **labels: str) -> float:
        async with aiohttp.ClientSession() as s, s.get(
                f"http://127.0.0.1:{self.mport}/metrics") as r:
            return sample_sum(await r.text(), name, **labels)

    async def wait_reloads(self, result: str, count: int) -> None:
        deadline = time.monotonic() + 10
        while await self.metric("runaway_sidecar_config_reloads_total",
                                result=result) < count:
            assert time.monotonic() < deadline, self.log.read_text()
            await asyncio.sleep(0.05)

    async def cut(self) -> bool:
        """Whether a loop request through the sidecar is cut (a ``: runaway`` comment)."""
        async with aiohttp.ClientSession() as s, s.post(
                f"http://127.0.0.1:{self.port}/v1/chat/completions", json=LOOP) as r:
            return b": runaway" in await r.read()


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Mounted]:
    m = Mounted(tmp_path)
    m.publish('mode = "enforce"\n')
    m.start()
    yield m
    m.stop()


async def test_configmap_update_reloads_without_restart(mounted: Mounted) -> None:
    """A ConfigMap update published by symlink swap is served within a poll, by the same
    process; a bad update is refused and counted, and the last good config stays."""
    assert await mounted.cut()
    mounted.publish('mode = "shadow"\n')
    await mounted.wait_reloads("ok", 1)
    assert not await mounted.cut()
    changed = mounted.events("config_file_changed")
    assert len(changed) == 1
    assert str(changed[0]["target"]).startswith(str(mounted.mount.resolve() / ".."))
    assert mounted.events("config_reloaded")[0]["mode"] == "shadow"

    mounted.publish("mode = 'loud'\n")
    await mounted.wait_reloads("error", 1)
    assert not await mounted.cut()  # still shadow
    assert mounted.events("config_reload_failed")
    assert await mounted.metric("runaway_sidecar_config_reloads_total", result="ok") == 1
    assert mounted.procs[-1].poll() is None
    assert len(mounted.events("listening")) == 1  # one process start: no restart


async def test_sighup_after_an_edit_is_one_reload(mounted: Mounted) -> None:
    """A file reloaded by SIGHUP is not reloaded again by the next poll. (A poll may still
    land between the edit and the signal and reload first; then it comes before.)"""
    mounted.publish('mode = "shadow"\n')
    mounted.procs[-1].send_signal(signal.SIGHUP)
    await mounted.wait_reloads("ok", 1)
    await asyncio.sleep(0.5)  # five polls
    names = [e["event"] for e in map(orjson.loads, mounted.log.read_bytes().splitlines())]
    first_reload = names.index("config_reloaded")
    assert "config_file_changed" not in names[first_reload:], names
