"""Tests for sidecar.obs.metrics: exact values, bounded labels, exposition, multiprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sidecar.obs.exposition import exposition
from sidecar.obs.metrics import OTHER, LabelCap, Metrics

P = "runaway_sidecar_"


def make(allow: list[str] | None = None, **kw: int) -> tuple[Metrics, CollectorRegistry]:
    registry = CollectorRegistry()
    return Metrics(registry, allow if allow is not None else ["m1"], "1.2.3", **kw), registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(P + name, labels)


def test_scripted_runaway_gives_exact_counters() -> None:
    """A scripted cut-and-reissue request leaves exactly these counter values."""
    m, r = make()
    m.stream_started()
    m.runaway("m1", "periodic", "thinking", "enforce")
    m.detection_point("periodic", 700)
    m.wasted_tokens("m1", 700)
    m.saved_tokens("m1", 7492)
    m.reissue("m1", "thinking_off", "runaway")
    m.runaway("m1", "periodic", "content", "enforce")
    m.detection_point("periodic", 300)
    m.wasted_tokens("m1", 300)
    m.reissue("m1", "salvage", "ok")
    m.observe_thinking("m1", 700, 10.5)
    m.content_tokens("m1", 120)
    m.observe_ttfc("m1", 12.0)
    m.request_done("chat", "reissued", "m1")
    m.stream_ended()

    assert value(r, "requests_total", route="chat", outcome="reissued", model="m1") == 1
    assert (
        value(
            r, "runaways_total", model="m1", detector="periodic", channel="thinking", mode="enforce"
        )
        == 1
    )
    assert (
        value(
            r, "runaways_total", model="m1", detector="periodic", channel="content", mode="enforce"
        )
        == 1
    )
    assert value(r, "reissues_total", model="m1", step="thinking_off", outcome="runaway") == 1
    assert value(r, "reissues_total", model="m1", step="salvage", outcome="ok") == 1
    assert value(r, "wasted_tokens_total", model="m1") == 1000
    assert value(r, "saved_tokens_total", model="m1") == 7492
    assert value(r, "output_tokens_total", model="m1", channel="thinking") == 700
    assert value(r, "output_tokens_total", model="m1", channel="content") == 120
    assert value(r, "thinking_tokens_count", model="m1") == 1
    assert value(r, "thinking_tokens_sum", model="m1") == 700
    assert value(r, "thinking_tokens_bucket", model="m1", le="512.0") == 0
    assert value(r, "thinking_tokens_bucket", model="m1", le="1024.0") == 1
    assert value(r, "thinking_seconds_sum", model="m1") == 10.5
    assert value(r, "time_to_first_content_seconds_sum", model="m1") == 12.0
    assert value(r, "detection_point_tokens_count", detector="periodic") == 2
    assert value(r, "detection_point_tokens_sum", detector="periodic") == 1000
    assert value(r, "detection_point_tokens_bucket", detector="periodic", le="256.0") == 0
    assert value(r, "detection_point_tokens_bucket", detector="periodic", le="512.0") == 1
    assert value(r, "active_streams") == 0
    assert value(r, "build_info", version="1.2.3") == 1


def test_shadow_detections_are_counted_apart() -> None:
    """mode=shadow goes to shadow_detections_total and never to runaways_total."""
    m, r = make()
    m.runaway("m1", "ngram", "thinking", "shadow")
    m.runaway("m1", "ngram", "thinking", "shadow")
    m.request_done("chat", "shadow", "m1")
    assert (
        value(r, "shadow_detections_total", model="m1", detector="ngram", channel="thinking") == 2
    )
    assert (
        value(r, "runaways_total", model="m1", detector="ngram", channel="thinking", mode="shadow")
        is None
    )
    assert value(r, "requests_total", route="chat", outcome="shadow", model="m1") == 1


def test_other_counters_and_gauge() -> None:
    """Errors, disconnects, policy, reloads, exhaustion and the stream gauge count exactly."""
    m, r = make()
    for _ in range(3):
        m.stream_started()
    m.stream_ended()
    m.upstream_error("connect")
    m.upstream_error("connect")
    m.upstream_error("timeout")
    m.upstream_retry("watched")
    m.client_disconnect("chat")
    m.policy_decision("no-thinking-for-batch")
    m.reload("ok")
    m.reload("error")
    m.reload("error")
    m.ladder_exhausted("m1")
    m.wasted_tokens("m1", 0)
    assert value(r, "active_streams") == 2
    assert value(r, "upstream_errors_total", kind="connect") == 2
    assert value(r, "upstream_errors_total", kind="timeout") == 1
    assert value(r, "upstream_retries_total", pool="watched") == 1
    assert value(r, "upstream_retries_total", pool="passthrough") == 0
    assert value(r, "client_disconnects_total", route="chat") == 1
    assert value(r, "policy_decisions_total", rule="no-thinking-for-batch") == 1
    assert value(r, "config_reloads_total", result="ok") == 1
    assert value(r, "config_reloads_total", result="error") == 2
    assert value(r, "ladder_exhausted_total", model="m1") == 1
    assert value(r, "wasted_tokens_total", model="m1") is None


def test_known_label_values_start_at_zero() -> None:
    """Closed-enum counters and ladder exhaustion per allowed model exist at 0 from the start,
    so increase() catches their first event."""
    _m, r = make(["m1", "*"])
    for kind in ["connect", "timeout", "reset", "status_5xx", "protocol", "other"]:
        assert value(r, "upstream_errors_total", kind=kind) == 0
    for result in ["ok", "error"]:
        assert value(r, "config_reloads_total", result=result) == 0
    for pool in ["watched", "passthrough"]:
        assert value(r, "upstream_retries_total", pool=pool) == 0
    for route in ["chat", "completions", "passthrough"]:
        assert value(r, "client_disconnects_total", route=route) == 0
    assert value(r, "ladder_exhausted_total", model="m1") == 0
    assert value(r, "ladder_exhausted_total", model=OTHER) == 0
    assert value(r, "ladder_exhausted_total", model="*") is None


def test_agent_loop_series_start_at_zero() -> None:
    """Every agent-loop label set known at start (the routes with a tool-call history,
    each kind and action, each allowed model and other) is in a fresh registry's
    exposition at 0, so the alert's increase() sees a loop's first request; none for
    completions, which carries no history."""
    _m, r = make(["m1", "*"])
    body, _ = exposition(r)
    series = {
        (s.labels["route"], s.labels["model"], s.labels["kind"], s.labels["action"]): s.value
        for family in text_string_to_metric_families(body.decode())
        if family.name == P + "agent_loops"
        for s in family.samples if s.name.endswith("_total")}
    expected = {(route, model, kind, action)
                for route in ["chat", "messages", "responses"]
                for model in ["m1", OTHER]
                for kind in ["repeat", "cycle", "text"]
                for action in ["shadow", "nudge", "refuse", "passed"]}
    assert series == dict.fromkeys(expected, 0.0)


def test_passthrough_requests_have_empty_model_label() -> None:
    """Pass-through requests are counted with model="" whatever model is passed."""
    m, r = make()
    m.request_done("passthrough", "ok", "m1")
    m.request_done("passthrough", "ok")
    assert value(r, "requests_total", route="passthrough", outcome="ok", model="") == 2


def test_models_outside_allowlist_become_other() -> None:
    """An exact allow-list keeps its names and folds every other model into `other`."""
    m, r = make(["m1", "m2"])
    for model in ["m1", "m2", "m3", "evil\nname", None]:
        m.request_done("chat", "ok", model)
    assert value(r, "requests_total", route="chat", outcome="ok", model="m1") == 1
    assert value(r, "requests_total", route="chat", outcome="ok", model="m2") == 1
    assert value(r, "requests_total", route="chat", outcome="ok", model=OTHER) == 3
    assert m.model_label("m3") == OTHER


def test_empty_allowlist_maps_everything_to_other() -> None:
    """With no allow-list every model is `other`."""
    m, r = make([])
    m.request_done("completions", "ok", "m1")
    m.request_done("completions", "ok", "m2")
    assert value(r, "requests_total", route="completions", outcome="ok", model=OTHER) == 2


def test_wildcard_admits_up_to_the_cap() -> None:
    """`*` admits the first max_models distinct names, later ones become `other`."""
    m, r = make(["*"], max_models=2)
    for model in ["a", "b", "c", "a", "d", "b", "x" * 129]:
        m.request_done("chat", "ok", model)
    assert value(r, "requests_total", route="chat", outcome="ok", model="a") == 2
    assert value(r, "requests_total", route="chat", outcome="ok", model="b") == 2
    assert value(r, "requests_total", route="chat", outcome="ok", model=OTHER) == 3


def test_label_cap_exact_names_do_not_use_wildcard_slots() -> None:
    """Exact allow-list names never consume the wildcard budget."""
    cap = LabelCap(["pinned", "*"], cap=1)
    assert cap("pinned") == "pinned"
    assert cap("first") == "first"
    assert cap("second") == OTHER
    assert cap("pinned") == "pinned"


def test_detector_label_is_capped() -> None:
    """More than 50 distinct detector names cannot grow the label set past 51."""
    m, r = make()
    for i in range(60):
        m.detection_point(f"d{i}", 10)
    families = {f.name: f for f in r.collect()}
    labels = {s.labels["detector"] for s in families[P + "detection_point_tokens"].samples}
    assert len(labels) == 51
    assert OTHER in labels


def test_registries_are_independent() -> None:
    """Two Metrics on two registries do not share counts (no globals)."""
    m1, r1 = make()
    _m2, r2 = make()
    m1.upstream_error("reset")
    assert value(r1, "upstream_errors_total", kind="reset") == 1
    assert value(r2, "upstream_errors_total", kind="reset") == 0


def test_names_follow_prometheus_conventions() -> None:
    """Every family has the prefix, counters end in _total, histograms in a base unit,
    and no label could carry a request id or text."""
    m, r = make()
    m.request_done("chat", "ok", "m1")
    body, ctype = exposition(r)
    assert ctype.startswith("text/plain")
    families = list(text_string_to_metric_families(body.decode()))
    assert len(families) >= 17
    forbidden = {"request_id", "id", "prompt", "text", "path", "user"}
    allowed = {"route", "outcome", "model", "detector", "channel", "mode", "step", "kind",
               "pool"}
    allowed |= {"rule", "result", "version", "le", "reason", "action"}
    for fam in families:
        assert fam.name.startswith(P), fam.name
        if fam.type == "histogram":
            assert fam.name.endswith(("_seconds", "_tokens")), fam.name
        for sample in fam.samples:
            if fam.type == "counter" and not sample.name.endswith("_created"):
                assert sample.name.endswith("_total"), sample.name
            assert not forbidden & set(sample.labels), sample
            assert set(sample.labels) <= allowed, sample
    names = {f.name for f in families}
    assert P + "build_info" in names
    assert b'runaway_sidecar_build_info{version="1.2.3"} 1.0' in body


def test_multiprocess_env_set_after_import_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Setting PROMETHEUS_MULTIPROC_DIR after import raises instead of losing metrics."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR"):
        Metrics(CollectorRegistry(), ["m1"], "x")


WORKER = textwrap.dedent("""
    import sys
    from prometheus_client import CollectorRegistry
    from sidecar.obs.metrics import Metrics
    m = Metrics(CollectorRegistry(), ["m1"], "9.9.9")
    n = int(sys.argv[1])
    for _ in range(n):
        m.request_done("chat", "reissued", "m1")
        m.stream_started()
        m.observe_thinking("m1", 1000, 3.0)
    m.runaway("m1", "periodic", "thinking", "enforce")
""")

READER = textwrap.dedent("""
    import json, sys
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families
    from sidecar.obs.exposition import exposition, mark_worker_dead
    for pid in sys.argv[1:]:
        mark_worker_dead(int(pid))
    body, ctype = exposition(CollectorRegistry())
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            key = s.name + json.dumps(dict(sorted(s.labels.items())))
            out[key] = s.value
    print(json.dumps({"ctype": ctype, "samples": out}))
""")


def run_py(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_multiprocess_exposition_merges_two_processes(tmp_path: Path) -> None:
    """Two real worker processes are summed; the live gauge drops a dead worker's share."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    w1 = subprocess.Popen([sys.executable, "-c", WORKER, "2"], env=env)
    w2 = subprocess.Popen([sys.executable, "-c", WORKER, "3"], env=env)
    assert w1.wait(timeout=60) == 0
    assert w2.wait(timeout=60) == 0

    def sample(data: dict[str, object], name: str, **labels: str) -> object:
        samples = data["samples"]
        assert isinstance(samples, dict)
        return samples.get(P + name + json.dumps(dict(sorted(labels.items()))))

    both = json.loads(run_py(READER, env).stdout)
    assert str(both["ctype"]).startswith("text/plain")
    assert sample(both, "requests_total", route="chat", outcome="reissued", model="m1") == 5
    assert (
        sample(
            both,
            "runaways_total",
            model="m1",
            detector="periodic",
            channel="thinking",
            mode="enforce",
        )
        == 2
    )
    assert sample(both, "thinking_tokens_count", model="m1") == 5
    assert sample(both, "thinking_tokens_sum", model="m1") == 5000
    assert sample(both, "active_streams") == 5
    assert sample(both, "build_info", version="9.9.9") == 1

    after = json.loads(run_py(READER, env, str(w1.pid)).stdout)
    assert sample(after, "active_streams") == 3
    assert sample(after, "requests_total", route="chat", outcome="reissued", model="m1") == 5
