"""Real Prometheus and Alertmanager for the alerts suite (``tests/deploy/test_alerts_live.py``),
a webhook that receives what Alertmanager delivers, and the time-scaled alert rules.

The shipped rules wait 5 to 30 minutes (``for:``) over windows of 5 to 30 minutes. The
suite cannot wait that long, so :func:`scaled_rules` derives a copy from the shipped file
in which every ``for:`` duration and every range window is divided by the same factor;
every other byte stays as shipped (``tests/deploy/test_scaled_rules.py`` checks that).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}
#: A ``for:`` duration (whole line) and a PromQL range window such as ``[5m]``.
_FOR = re.compile(r"^(?P<pre>\s*for: )(?P<n>\d+)(?P<unit>[smh])(?P<post>\s*)$", re.MULTILINE)
_WINDOW = re.compile(r"(?P<pre>\[)(?P<n>\d+)(?P<unit>[smh])(?P<post>\])")


def scaled_rules(text: str, factor: int) -> str:
    """``text`` (a Prometheus rules file) with every ``for:`` duration and range window
    divided by ``factor``, written in whole seconds; nothing else changes."""

    def scale(m: re.Match[str]) -> str:
        seconds = int(m["n"]) * _UNIT_SECONDS[m["unit"]]
        if seconds % factor:
            raise ValueError(f"{m.group(0).strip()} is not a whole number of seconds / {factor}")
        return f"{m['pre']}{seconds // factor}s{m['post']}"

    return _WINDOW.sub(scale, _FOR.sub(scale, text))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback)
        return json.load(resp)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited: {log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2):  # noqa: S310
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} never answered: {log.read_text()[-3000:]}")
        time.sleep(0.2)


def start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``cmd`` in a session of its own (so :func:`stop` reaches its children), output to
    ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started by :func:`start`, its children too, and reap it."""
    stop_group(proc.pid)
    proc.wait(timeout=5)


def stop_group(pid: int, timeout: float = 20.0) -> str:
    """SIGTERM to the process group ``pid`` leads, SIGKILL to what is left after
    ``timeout``; says which ended it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return "SIGTERM"
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return f"SIGKILL after {timeout:g} s"


@dataclass
class Prometheus:
    """A Prometheus server on loopback, its HTTP API wrapped."""

    url: str
    proc: subprocess.Popen[bytes]

    @classmethod
    def launch(cls, binary: str, workdir: Path, *, rules: str, scrape: dict[str, str],
               alertmanager: str, scrape_interval: str = "2s",
               evaluation_interval: str = "1s") -> Prometheus:
        """Scrape ``scrape`` (job -> host:port) every ``scrape_interval`` (also the scrape
        timeout), evaluate ``rules`` every ``evaluation_interval``, send alerts to
        ``alertmanager`` (host:port)."""
        (workdir / "rules.yml").write_text(rules)
        config = {  # JSON is YAML
            "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                       "evaluation_interval": evaluation_interval},
            "rule_files": ["rules.yml"],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                               for job, target in scrape.items()],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config, indent=1))
        port = free_port()
        log = workdir / "prometheus.log"
        proc = start([binary, f"--config.file={workdir / 'prometheus.yml'}",
                      f"--storage.tsdb.path={workdir / 'tsdb'}",
                      f"--web.listen-address=127.0.0.1:{port}"], log)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url + "/-/ready", proc, log)
        return cls(url, proc)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        return self._api("query", params)

    def query_range(self, expr: str, start: float, end: float,
                    step: float) -> list[dict[str, Any]]:
        return self._api("query_range", {"query": expr, "start": f"{start:.3f}",
                                         "end": f"{end:.3f}", "step": str(step)})

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts active now (pending or firing), as the API lists them."""
        data = get_json(self.url + "/api/v1/alerts")["data"]["alerts"]
        return list(data)

    def _api(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        body = get_json(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return list(body["data"]["result"])


def launch_alertmanager(binary: str, workdir: Path, webhook: str) -> tuple[str,
                                                                         subprocess.Popen[bytes]]:
    """An Alertmanager on loopback that delivers every alert to ``webhook`` at once
    (group_wait 1 s), resolved ones too; clustering off."""
    config = {
        "route": {"receiver": "webhook", "group_by": ["alertname", "instance", "model"],
                  "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "webhook", "webhook_configs": [
            {"url": webhook, "send_resolved": True}]}],
    }
    (workdir / "alertmanager.yml").write_text(json.dumps(config, indent=1))
    port = free_port()
    log = workdir / "alertmanager.log"
    proc = start([binary, f"--config.file={workdir / 'alertmanager.yml'}",
                  f"--storage.path={workdir / 'am-data'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], log)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/-/ready", proc, log)
    return url, proc


@dataclass
class Webhook:
    """An HTTP server that keeps every JSON body POSTed to it, with the time it came."""

    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    url: str = ""

    @contextlib.contextmanager
    def serve(self) -> Iterator[Webhook]:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}/alerts"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()

    def alerts(self, alertname: str, status: str = "firing") -> list[tuple[float, dict[str, Any]]]:
        """Each alert of that name and status delivered so far, with its arrival time."""
        return [(t, alert) for t, payload in self.received for alert in payload["alerts"]
                if alert["labels"]["alertname"] == alertname and alert["status"] == status]
