"""The alert rules on real servers: runaways through the sidecar in front of real vLLM make
a real Prometheus raise ``RunawaySidecarRunawayRateHigh`` (pending, then firing) and a real
Alertmanager deliver it to a webhook; healthy traffic under a model name of its own raises
nothing; stopping vLLM raises ``RunawaySidecarUpstreamDown``. Then the Grafana dashboard's
queries run against the same Prometheus.

Run by ``scripts/e2e-alerts.sh`` (marker ``alerts``), which starts one vLLM server with the
looping tiny model under two names and passes ``E2E_VLLM_URL`` and ``E2E_VLLM_PID``:

- ``tiny-loop``, asked with thinking on: the model loops until the sidecar cuts it and
  reissues with thinking off (outcome ``reissued``);
- ``tiny-steady``, asked with thinking off: it answers in 11 tokens (outcome ``ok``).

The rules are the shipped file with every ``for:`` and range window divided by
:data:`SCALE` (``promstack.scaled_rules``): 5 minutes become 15 s, 10 minutes 30 s.
Prometheus scrapes the sidecar (``job="runaway-sidecar"``) and vLLM (``job="vllm"``)
every 2 s (a 1 s scrape timeout failed now and then on a loaded 2-core machine) and
evaluates the rules every second. The suite's log, written to ``E2E_REPORT``, lists each alert with
the times it went pending and firing and every payload the webhook received.
"""

from __future__ import annotations

import calendar
import contextlib
import http.client
import itertools
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import promstack
from tests.deploy.promstack import Prometheus, Webhook

pytestmark = [pytest.mark.alerts, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "runaway-sidecar.rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "runaway-sidecar.json"
SCALE = 20  # 5m -> 15s, 10m -> 30s
WINDOW = 15  # seconds: the shipped 5-minute window, scaled
LOOP, STEADY = "tiny-loop", "tiny-steady"
RATE, DOWN = "RunawaySidecarRunawayRateHigh", "RunawaySidecarUpstreamDown"
#: Dashboard queries that stay empty under this suite's traffic, by the metric they read,
#: with the traffic that would feed them.
EMPTY_WITHOUT = {
    "runaway_sidecar_shadow_detections_total": "requests in mode shadow (this sidecar enforces)",
    "runaway_sidecar_ladder_exhausted_total": "a model that loops with thinking off too, on "
                                              "every ladder step (the tiny leaky model)",
    "runaway_sidecar_upstream_retries_total": "an upstream that closes idle keep-alive "
                                              "connections before upstream_keepalive_seconds",
    "runaway_sidecar_client_disconnects_total": "clients that leave before the response ends",
    "runaway_sidecar_agent_loops_total": "agent requests whose history repeats one tool call "
                                         "with the same result (scripts/e2e-agents.sh)",
}


def _wait_scraped(prom: Prometheus, metric: str, timeout: float) -> None:
    """Wait until Prometheus holds a sample of ``metric`` (within ``timeout`` seconds)."""
    deadline = time.time() + timeout
    while not prom.query(metric):
        assert time.time() < deadline, f"{metric} not scraped within {timeout} s"
        time.sleep(0.5)


def report(line: str = "") -> None:
    """One line of the suite's log: to ``E2E_REPORT`` when set, and to stdout."""
    print(line)
    path = os.environ.get("E2E_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run this suite with scripts/e2e-alerts.sh")
    return value


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"none of {names} is installed: scripts/e2e-alerts.sh installs them")


# ---------------------------------------------------------------------------- traffic

def _post(port: int, body: dict[str, Any]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@dataclass
class Traffic:
    """Client threads that send requests until stopped, counting the statuses."""

    port: int
    statuses: dict[str, dict[int, int]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def client(self, model: str, body: dict[str, Any], pause: float) -> None:
        """A thread that sends ``body`` to ``model`` again and again, ``pause`` seconds
        apart, each time with a prompt of its own (the sidecar's runaway memory sends a
        prompt that ran away before straight to thinking off)."""
        counts = self.statuses.setdefault(model, {})

        def run() -> None:
            for n in itertools.count():
                if self.stop.is_set():
                    break
                prompt = {"messages": [{"role": "user", "content": f"fix bug {n} of {id(counts)}"}]}
                try:
                    status, _ = _post(self.port, {"model": model, **body, **prompt})
                except OSError:
                    status = 0
                counts[status] = counts.get(status, 0) + 1
                # (an upstream that is down fails at once: no need to flood the sidecar)
                self.stop.wait(pause if status == 200 else max(pause, 0.1))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=70)


# --------------------------------------------------------------------- alert tracking

@dataclass
class Seen:
    """One alert instance as Prometheus listed it: first seen pending and firing."""

    labels: dict[str, str]
    active_at: str = ""
    pending: float | None = None
    firing: float | None = None


@dataclass
class Tracker:
    """Polls Prometheus' active alerts twice a second and keeps each state change."""

    prom: Prometheus
    seen: dict[tuple[tuple[str, str], ...], Seen] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> None:
        now = time.time()
        for alert in self.prom.alerts():
            key = tuple(sorted(alert["labels"].items()))
            entry = self.seen.setdefault(key, Seen(alert["labels"], alert["activeAt"]))
            if alert["state"] == "pending" and entry.pending is None:
                entry.pending = now
            if alert["state"] == "firing" and entry.firing is None:
                entry.firing = now

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.poll()

    def find(self, alertname: str, **labels: str) -> list[Seen]:
        return [s for s in self.seen.values() if s.labels["alertname"] == alertname
                and all(s.labels.get(k) == v for k, v in labels.items())]


def _rfc3339(stamp: str) -> float:
    """Prometheus' activeAt (RFC 3339 in UTC, up to nanoseconds) as epoch seconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$", stamp)
    assert m, stamp
    return calendar.timegm(time.strptime(m[1], "%Y-%m-%dT%H:%M:%S")) + float(m[2] or 0)


# ---------------------------------------------------------------------------- scenario

@dataclass
class Run:
    prom: Prometheus
    tracker: Tracker
    webhook: Webhook
    traffic: Traffic
    instance: str
    t0: float
    vllm_stopped: float = 0.0
    end: float = 0.0


def _wait_delivered(webhook: Webhook, alertname: str, timeout: float, **labels: str) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for t, alert in webhook.alerts(alertname):
            if all(alert["labels"].get(k) == v for k, v in labels.items()):
                return t
        time.sleep(0.5)
    raise AssertionError(f"{alertname} {labels} not delivered within {timeout} s")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The whole scenario: runaways and healthy traffic until the runaway alert is
    delivered, then vLLM stopped until the upstream-down alert is delivered."""
    vllm_url, vllm_pid = _env("E2E_VLLM_URL"), int(_env("E2E_VLLM_PID"))
    prometheus = _binary("prometheus")
    alertmanager = _binary("prometheus-alertmanager", "alertmanager")
    work = Path(os.environ.get("E2E_LOGS") or tmp_path_factory.mktemp("alerts"))
    port, mport = promstack.free_port(), promstack.free_port()
    config = work / "sidecar.toml"
    config_text = (f'upstream = "{vllm_url}"\nlisten = "127.0.0.1:{port}"\n'
                   f'metrics_listen = "127.0.0.1:{mport}"\nmode = "enforce"\n'
                   f'model_allowlist = ["{LOOP}", "{STEADY}"]\nconfig_watch_seconds = 1.0\n'
                   '[reissue]\nladder = ["no-think", "salvage"]\nmax_attempts = 3\n')
    config.write_text(config_text)
    with contextlib.ExitStack() as stack:  # stops the servers in reverse order
        webhook = stack.enter_context(Webhook().serve())
        sidecar = promstack.start([sys.executable, "-m", "sidecar", "serve", "--config",
                                   str(config)], work / "sidecar.log")
        stack.callback(promstack.stop, sidecar)
        promstack.wait_ready(f"http://127.0.0.1:{mport}/readyz", sidecar, work / "sidecar.log")
        am_url, am = promstack.launch_alertmanager(alertmanager, work, webhook.url)
        stack.callback(promstack.stop, am)
        rules = promstack.scaled_rules(RULES.read_text(), SCALE)
        prom = Prometheus.launch(prometheus, work, rules=rules, alertmanager=am_url[7:],
                                 scrape={"runaway-sidecar": f"127.0.0.1:{mport}",
                                         "vllm": vllm_url[7:]})
        stack.callback(promstack.stop, prom.proc)
        tracker = Tracker(prom)
        threading.Thread(target=tracker.run, daemon=True).start()
        traffic = Traffic(port)
        t0 = time.time()
        result = Run(prom, tracker, webhook, traffic, f"127.0.0.1:{mport}", t0)
        report(f"Prometheus {prom.url}, Alertmanager {am_url}, webhook {webhook.url}; "
               f"sidecar {result.instance}; rules scaled 1/{SCALE}; t=0 at "
               f"{time.strftime('%H:%M:%S', time.localtime(t0))}")
        think = {"max_tokens": 4000}
        traffic.client(LOOP, think, 0.0)
        traffic.client(LOOP, {**think, "stream": True}, 0.0)
        traffic.client(STEADY, {**think, "max_tokens": 100, "chat_template_kwargs": {
            "enable_thinking": False}}, 0.3)
        try:
            time.sleep(5)
            # The reload counter must have been scraped at 0 first: a series whose first
            # sample is already 1 shows no increase (Prometheus's first scrape can come
            # late on a loaded machine).
            _wait_scraped(prom, "runaway_sidecar_config_reloads_total", 60)
            # An edit of the config file (a comment): the watcher reloads it.
            (work / "sidecar.toml.new").write_text("# edited\n" + config_text)
            os.replace(work / "sidecar.toml.new", config)
            _wait_delivered(webhook, RATE, 150, model=LOOP)
            result.vllm_stopped = time.time()
            # (vLLM's CPU build was seen to outlast SIGTERM by 20 s and more here.)
            how = promstack.stop_group(vllm_pid, timeout=5)
            report(f"t={result.vllm_stopped - t0:6.1f}s  vLLM stopped ({how}), gone "
                   f"{time.time() - result.vllm_stopped:.1f} s later")
            _wait_delivered(webhook, DOWN, 150)
        except AssertionError:
            _log_run(result)
            raise
        finally:
            traffic.close()
        tracker.stop.set()
        tracker.poll()
        result.end = time.time()
        _log_run(result)
        yield result


def _log_run(run: Run) -> None:
    def rel(t: float | None) -> str:
        return "-" if t is None else f"{t - run.t0:6.1f}s"

    report(f"requests sent (by model, HTTP status: count): {run.traffic.statuses}")
    report("alerts seen by Prometheus (polled every 0.5 s; t=0 when traffic started):")
    for s in sorted(run.tracker.seen.values(), key=lambda s: s.pending or s.firing or 0):
        labels = {k: v for k, v in s.labels.items() if k != "alertname"}
        report(f"  {s.labels['alertname']:34} {labels}  activeAt {rel(_rfc3339(s.active_at))}"
               f"  pending seen {rel(s.pending)}  firing seen {rel(s.firing)}")
    report("webhook payloads received from Alertmanager (the first in full; then each "
           "alert's status, labels and summary):")
    for i, (t, payload) in enumerate(run.webhook.received):
        if i == 0:
            report(f"  t={rel(t)} {json.dumps(payload, sort_keys=True)}")
            continue
        for alert in payload["alerts"]:
            report(f"  t={rel(t)} {alert['status']:8} {json.dumps(alert['labels'], sort_keys=True)}"
                   f"  {alert['annotations']['summary']!r}")


# ------------------------------------------------------------------------------- tests

def test_runaway_alert_goes_pending_then_firing_and_is_delivered(run: Run) -> None:
    """Runaways on tiny-loop raise the runaway-rate alert: pending, firing no sooner than
    its scaled ``for:`` (30 s) later, then delivered with its labels and annotations."""
    (seen,) = run.tracker.find(RATE, model=LOOP)
    assert seen.pending is not None
    assert seen.firing is not None
    assert seen.pending < seen.firing
    assert seen.firing - _rfc3339(seen.active_at) >= 30 - 1  # one evaluation of slack
    t, alert = next((t, a) for t, a in run.webhook.alerts(RATE)
                    if a["labels"]["model"] == LOOP)
    assert t >= seen.firing - 1
    assert {k: alert["labels"][k] for k in ("job", "instance", "model", "severity")} == {
        "job": "runaway-sidecar", "instance": run.instance, "model": LOOP,
        "severity": "warning"}
    annotations = alert["annotations"]
    assert f"for {LOOP} on {run.instance}" in annotations["summary"]
    assert "ran away" in annotations["description"]
    assert annotations["runbook_url"] == "deploy/README.md#runawaysidecarrunawayratehigh"


def test_no_runaway_alert_for_the_healthy_model(run: Run) -> None:
    """tiny-steady carried enough traffic for the rule's floor (10 requests per window),
    all answered, and no runaway alert ever went pending for it."""
    assert run.tracker.find(RATE, model=STEADY) == []
    assert not [a for _, a in run.webhook.alerts(RATE) if a["labels"]["model"] == STEADY]
    floor = run.prom.query_range(
        f'sum(increase(runaway_sidecar_requests_total{{model="{STEADY}"}}[{WINDOW}s]))',
        run.t0 + WINDOW, run.vllm_stopped, 1)
    assert max(float(v) for _, v in floor[0]["values"]) >= 10
    ok = run.prom.query(f'sum by (outcome) (runaway_sidecar_requests_total{{model="{STEADY}"}})',
                        run.vllm_stopped)
    assert {r["metric"]["outcome"] for r in ok} == {"ok"}


def test_upstream_down_fires_when_vllm_stops(run: Run) -> None:
    """After vLLM stops, the upstream-down alert goes pending, fires after its scaled
    ``for:`` (15 s) and is delivered for the sidecar's instance."""
    (seen,) = run.tracker.find(DOWN)
    assert seen.pending is not None
    assert seen.firing is not None
    assert run.vllm_stopped < seen.pending < seen.firing
    assert seen.firing - _rfc3339(seen.active_at) >= 15 - 1
    (t, alert), *_ = run.webhook.alerts(DOWN)
    assert alert["labels"]["instance"] == run.instance
    assert alert["labels"]["severity"] == "critical"
    assert "refuses connections" in alert["annotations"]["summary"]
    assert t >= seen.firing - 1
    # Prometheus scraped vLLM too, until it stopped.
    up = run.prom.query_range('up{job="vllm"}', run.t0, run.end, 1)
    values = [float(v) for _, v in up[0]["values"]]
    assert values[0] == 1
    assert values[-1] == 0


def test_no_sidecar_down_false_alarm(run: Run) -> None:
    """The sidecar stayed up throughout: its down alert never fired (a scrape slower than
    the suite's 2 s timeout on a loaded machine may make it pending, and that is logged)."""
    assert all(s.firing is None for s in run.tracker.find("RunawaySidecarDown"))


def _dashboard_queries(range_s: int) -> list[tuple[str, str, str]]:
    """(panel title, metric, PromQL) for every target, Grafana's variables
    replaced as Grafana would with "All" selected and a 2 s scrape interval."""
    dash = json.loads(DASHBOARD.read_text())
    subst = {"$__rate_interval": "8s",  # max(4 x scrape interval, step + scrape interval)
             "$__range": f"{range_s}s", "$job": "runaway-sidecar", "$instance": ".*",
             "$model": ".*"}
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in subst.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, expr
            metric = re.search(r"runaway_sidecar_[a-z_]+", expr)
            assert metric is not None
            out.append((panel["title"], re.sub(r"_bucket$", "", metric.group(0)), expr))
    return out


#: The dashboard's metrics that this suite's traffic feeds: their queries must return
#: non-zero values.
FED = ("runaway_sidecar_requests_total", "runaway_sidecar_runaways_total",
       "runaway_sidecar_reissues_total", "runaway_sidecar_upstream_errors_total",
       "runaway_sidecar_config_reloads_total")


def test_dashboard_panels_fed_by_this_traffic_return_data(run: Run) -> None:
    """The dashboard's queries for requests, runaways, reissues, upstream errors and config
    reloads return non-zero data over the run; the queries that stay empty or zero are
    listed, with the traffic that would feed them, and are no others than those."""
    quiet = []
    report("dashboard queries against the live Prometheus (t=0 to the end of the run):")
    for title, metric, expr in _dashboard_queries(int(run.end - run.t0) + 1):
        # Over the run, as a dashboard refreshed during it would have shown it.
        series = run.prom.query_range(expr, run.t0, run.end, 1)
        values = [v for r in series for _, v in r["values"]]
        points = [float(v) for v in values if v not in ("NaN", "+Inf", "-Inf")]
        state = ("no data" if not points else
                 "zeros" if not any(points) else f"max {max(points):.3g}")
        report(f"  {title:44} {metric:46} {len(points):4} points, {state}")
        if not any(points):
            quiet.append(metric)
        if metric in FED:
            assert any(points), (title, expr)
    for metric in dict.fromkeys(quiet):
        report(f"  stays empty or zero: {metric}: needs "
               f"{EMPTY_WITHOUT.get(metric, '(unexplained)')}")
    assert set(quiet) <= set(EMPTY_WITHOUT), set(quiet) - set(EMPTY_WITHOUT)
