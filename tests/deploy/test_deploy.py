"""Static checks of deploy/: the example config against the config schema, and the alert
rules, their tests and the dashboard against the metrics that sidecar/obs/metrics.py exports.

promtool and systemd-analyze are the real validators (scripts/check-deploy.sh); these
tests catch drift between the deploy files and the code, with no YAML parser: the
rules are read as text, which is enough to pull out metric names and label matchers.
"""

from __future__ import annotations

import configparser
import dataclasses
import json
import re
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest
from prometheus_client import CollectorRegistry

from sidecar import config as cfg
from sidecar import labels
from sidecar.obs import metrics
from sidecar.service import activation

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLE = DEPLOY / "examples" / "gpu0.toml"
RULES = DEPLOY / "prometheus" / "runaway-sidecar.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "runaway-sidecar.rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "runaway-sidecar.json"
UNIT = DEPLOY / "systemd" / "runaway-sidecar@.service"
SOCKET_UNIT = DEPLOY / "systemd" / "runaway-sidecar@.socket"
README = DEPLOY / "README.md"

_OPTION_LINE = re.compile(r"^# ?((?:[a-z_]+ = .*)|(?:\[.*\]))$")


def uncommented(text: str) -> str:
    """The example with every commented-out option and table header switched on."""
    out = []
    for line in text.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            out.append(m.group(1))
        elif not line.startswith("#"):
            out.append(line)
    return "\n".join(out) + "\n"


def commented_options(text: str) -> dict[str, Any]:
    """Commented-out ``key = value`` lines of the plain tables, by dotted key."""
    found: dict[str, Any] = {}
    table = ""
    for line in text.splitlines():
        header = re.match(r"^#? ?\[(\[)?([a-z_.]+)\]\]?$", line)
        if header:
            table = "<array>" if header.group(1) else header.group(2)
            continue
        m = re.match(r"^# ?([a-z_]+ = .*)$", line)
        if m and table != "<array>":
            ((key, value),) = tomllib.loads(m.group(1)).items()
            found[f"{table}.{key}" if table else key] = value
    return found


def is_array_of_tables(value: object) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict)


def flat_keys(data: dict[str, Any]) -> set[str]:
    """Dotted keys of the scalar (and list-of-scalar) options, as ``option_keys`` lists."""
    keys = set()
    for key, value in data.items():
        if key in cfg.TABLES:
            keys |= {f"{key}.{k}" for k, v in value.items() if not is_array_of_tables(v)}
        elif not is_array_of_tables(value):
            keys.add(key)
    return keys


def default_of(dotted: str) -> Any:
    table, _, name = dotted.rpartition(".")
    obj = getattr(cfg.Config(), table) if table else cfg.Config()
    return getattr(obj, name)


def test_example_config_loads() -> None:
    """deploy/examples/gpu0.toml loads through the real config loader, in shadow mode."""
    loaded = cfg.load_config(EXAMPLE, env={})
    assert loaded.mode == "shadow"
    assert loaded.upstream == "http://127.0.0.1:8001"
    assert loaded.model_allowlist == ("Qwen/Qwen3-32B",)


def test_example_documents_every_option(tmp_path: Path) -> None:
    """Every option of the schema appears in the example exactly once, set or commented
    out, and the fully uncommented example loads too."""
    text = uncommented(EXAMPLE.read_text(encoding="utf-8"))
    data = tomllib.loads(text)  # a key documented twice would be a TOML error here
    schema = {key for key, _ in cfg.option_keys()}
    assert flat_keys(data) == schema
    full = tmp_path / "full.toml"
    full.write_text(text, encoding="utf-8")
    loaded = cfg.load_config(full, env={})
    assert loaded.api_key is not None


def test_commented_values_are_the_defaults() -> None:
    """A commented-out option shows its real default (unless the default is unset)."""
    documented = commented_options(EXAMPLE.read_text(encoding="utf-8"))
    assert len(documented) >= 20
    for key, value in documented.items():
        default = default_of(key)
        if default is None:
            continue
        if isinstance(default, tuple):
            default = list(default)
        assert value == default, f"{key}: example says {value!r}, default is {default!r}"


def test_array_table_examples_follow_the_schema() -> None:
    """[[reissue.rules]] shows the built-in rules and [[models]] uses every field."""
    data = tomllib.loads(uncommented(EXAMPLE.read_text(encoding="utf-8")))
    rules = [cfg.ThinkingOffRule(**r) for r in data["reissue"]["rules"]]
    assert tuple(rules) == cfg.DEFAULT_THINKING_OFF_RULES
    fields = {f.name for f in dataclasses.fields(cfg.ModelOverride)}
    assert {k for m in data["models"] for k in m} == fields


def exported_names() -> set[str]:
    """Every sample name the metrics module can export, with histogram suffixes."""
    registry = CollectorRegistry()
    metrics.Metrics(registry, ["m"], "0")
    names = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


@pytest.mark.parametrize("path", [RULES, RULE_TESTS, DASHBOARD], ids=lambda p: p.name)
def test_deploy_files_use_only_exported_metrics(path: Path) -> None:
    """Each runaway_sidecar_* name in the rules, their tests and the dashboard exists."""
    used = set(re.findall(r"runaway_sidecar_[a-z_]+", path.read_text(encoding="utf-8")))
    assert used, path
    assert used <= exported_names(), used - exported_names()


LABEL_ENUMS: dict[str, Any] = {
    "route": labels.Route,
    "outcome": labels.Outcome,
    "kind": labels.UpstreamErrorKind,
    "step": labels.LadderStep,
    "channel": labels.Channel,
    "result": labels.ReloadResult,
    "mode": labels.WatchMode,
    "action": labels.AgentLoopAction,
}


@pytest.mark.parametrize("path", [RULES, RULE_TESTS, DASHBOARD], ids=lambda p: p.name)
def test_label_values_belong_to_the_enums(path: Path) -> None:
    """Label values matched in PromQL and used in test series are values the code emits
    (reissue outcomes are checked against their own enum)."""
    text = path.read_text(encoding="utf-8").replace('\\"', '"')
    checked = 0
    for block in re.findall(r"runaway_sidecar_([a-z_]+)\{([^}]*)\}", text):
        name, matchers = block
        for label, _op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
            enum = LABEL_ENUMS.get(label)
            if name.startswith("reissues") and label == "outcome":
                enum = labels.ReissueOutcome
            if name.startswith("agent_loops") and label == "kind":
                enum = labels.LoopKind
            if enum is None:
                continue
            for alternative in value.split("|"):
                assert alternative in get_args(enum), (path.name, name, label, alternative)
                checked += 1
    assert checked >= 10


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_is_annotated_and_has_a_runbook_section() -> None:
    """Each alert has summary, description and a runbook_url whose anchor is a heading
    of deploy/README.md."""
    text = RULES.read_text(encoding="utf-8")
    anchors = {
        github_anchor(line.lstrip("#"))
        for line in README.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    blocks = text.split("- alert: ")[1:]
    assert len(blocks) >= 6
    for block in blocks:
        name = block.split()[0]
        assert "summary:" in block, name
        assert "description:" in block, name
        url = re.search(r'runbook_url: "deploy/README\.md#([^"]+)"', block)
        assert url, name
        assert url.group(1) == name.lower()
        assert url.group(1) in anchors, name
        assert f"alertname: {name}" in RULE_TESTS.read_text(encoding="utf-8"), name


def test_dashboard_has_the_required_panels() -> None:
    """The dashboard parses and shows runaway rate, tokens saved, thinking share,
    reissue outcomes and latency."""
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    titles = [p["title"] for p in dash["panels"]]
    for wanted in [
        "Runaway rate by model",
        "Tokens saved and wasted",
        "Thinking share by model",
        "Reissue outcomes by ladder step",
        "Time to first content token",
    ]:
        assert wanted in titles
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]


def test_unit_file_settings() -> None:
    """The systemd template reads %i.toml and %i.env, notifies, restarts on failure,
    is hardened, and gives the drain time to finish."""
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text(encoding="utf-8"))
    service = parser["Service"]
    assert service["Type"] == "notify"
    assert "--config /etc/runaway-sidecar/%i.toml" in service["ExecStart"]
    assert service["EnvironmentFile"] == "-/etc/runaway-sidecar/%i.env"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["Restart"] == "on-failure"
    for key, value in {
        "DynamicUser": "yes",
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    }.items():
        assert service[key] == value, key
    assert "MemoryMax" in service
    assert "@system-service" in UNIT.read_text(encoding="utf-8")
    stop = float(service["TimeoutStopSec"].removesuffix("s"))
    assert stop > cfg.Config().drain_timeout_seconds


def unit_sections(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(encoding="utf-8"))
    return parser


def test_socket_unit_settings() -> None:
    """The socket unit listens on the example's client port and passes it to the service
    of the same instance as its client listener; the service wants it, is ordered after
    it, and sets a watchdog that the event loop pings."""
    sock = unit_sections(SOCKET_UNIT)
    example = cfg.load_config(EXAMPLE, env={})
    assert sock["Socket"]["ListenStream"] == example.listen
    assert sock["Socket"].get("Accept", "no") == "no"  # the service accepts, not systemd
    assert sock["Socket"]["FileDescriptorName"] != activation.METRICS_NAME
    assert int(sock["Socket"]["Backlog"]) >= 1024
    assert sock["Install"]["WantedBy"] == "sockets.target"
    unit = unit_sections(UNIT)
    assert "runaway-sidecar@%i.socket" in unit["Unit"]["Wants"].split()
    assert "runaway-sidecar@%i.socket" in unit["Unit"]["After"].split()
    watchdog = float(unit["Service"]["WatchdogSec"].removesuffix("s"))
    assert 5 <= watchdog <= 60
