"""Configuration: one frozen tree of dataclasses, loaded from TOML, environment and flags.

Precedence, highest first: command-line flag, environment variable, config file, default.

- TOML: top-level keys are the fields of :class:`Config`; ``[detectors]`` holds the
  fields of :class:`detectors.DetectorConfig`; ``[reissue]``, ``[memory]``, ``[policy]``
  and ``[record]`` likewise; ``[[models]]`` and ``[[reissue.rules]]`` are arrays of
  tables.
- Environment: ``RUNAWAY_SIDECAR_<NAME>`` for a top-level key, and
  ``RUNAWAY_SIDECAR_<TABLE>_<NAME>`` for a key of a table, upper-cased
  (``RUNAWAY_SIDECAR_DETECTORS_THINKING_TOKEN_BUDGET=4096``). Lists are comma separated,
  an optional value is cleared with ``none``.
- Flags: ``--name`` for top-level keys and ``--table.name`` for table keys, with dashes
  for underscores (``--detectors.thinking-token-budget 4096``).

Every error is a :class:`~sidecar.errors.ConfigError` whose message names the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from detectors import DetectorConfig, default_chain
from detectors.agent_loops import LoopConfig
from sidecar.config.coerce import build, coerce, is_scalar
from sidecar.errors import ConfigError
from sidecar.labels import (
    AgentLoopMode,
    DialectChoice,
    DialectName,
    LogFormat,
    Mode,
    Thinking,
    WatchedRoute,
)

ENV_PREFIX = "RUNAWAY_SIDECAR_"


@dataclass(frozen=True, slots=True)
class ThinkingOffRule:
    """How to turn thinking off for models whose name matches ``match`` (a regex,
    searched case-insensitively): ``set`` is deep-merged into the request body."""

    match: str
    set: Mapping[str, Any]


DEFAULT_THINKING_OFF_RULES: tuple[ThinkingOffRule, ...] = (
    ThinkingOffRule(r"qwen3|qwq|glm|nemotron",
                    {"chat_template_kwargs": {"enable_thinking": False}}),
    ThinkingOffRule(r"deepseek|kimi", {"chat_template_kwargs": {"thinking": False}}),
    ThinkingOffRule(r".*", {"reasoning_effort": "none"}),
)


@dataclass(frozen=True, slots=True)
class ModelOverride:
    """Per-model settings for models whose name matches ``match`` (regex, case-insensitive).
    The first matching entry wins; unset values fall back to the global ones."""

    match: str
    mode: Mode | None = None
    thinking_token_budget: int | None = None
    thinking_seconds_budget: float | None = None
    #: Detector thresholds for this model: ``[detectors]`` keys (budgets aside, which are
    #: the two fields above), each replacing the global value (``runaway-sidecar
    #: calibrate`` proposes them). Checked and typed when the config loads.
    detectors: Mapping[str, Any] = field(default_factory=dict)
    agent_loops: AgentLoopMode | None = None


@dataclass(frozen=True, slots=True)
class DialectLadder:
    """The reissue ladder used in front of one upstream dialect (``sidecar.dialects``),
    e.g. a fallback model that honours ``think: false`` on Ollama."""

    dialect: DialectName
    ladder: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReissueConfig:
    """What the sidecar does after a cut (mode ``enforce``)."""

    # Ladder steps tried in order after a cut: "no-think" (same request, thinking off),
    # "salvage" (continue from the useful part of the reasoning, closed with </think>),
    # "fallback:MODEL" (thinking off on another model). After the last one the response
    # ends cleanly with finish_reason "length".
    ladder: tuple[str, ...] = ("no-think",)
    # Hard bound on upstream attempts per client request, the first one included.
    max_attempts: int = 3
    # How to disable thinking per model family; the first matching rule applies.
    rules: tuple[ThinkingOffRule, ...] = DEFAULT_THINKING_OFF_RULES
    # Per-dialect ladders; the entry for the upstream's dialect replaces ``ladder``.
    dialect_ladders: tuple[DialectLadder, ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Runaway memory: prompts that ran away recently go straight to thinking off."""

    enabled: bool = True
    ttl_seconds: float = 600.0
    max_entries: int = 10_000


Feature = Literal["code_block", "stack_trace", "math"]


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One thinking-policy rule (see ``sidecar/policy/rules.py``). Unset conditions always hold;
    unset actions change nothing."""

    name: str
    model: str | None = None  # regex on the model name (case-insensitive)
    route: WatchedRoute | None = None
    headers: Mapping[str, str] | None = None  # header name -> regex on its value
    system: str | None = None  # regex on the system prompt
    last_user: str | None = None  # regex on the last user message (or the prompt)
    features: tuple[Feature, ...] = ()  # any of these in the last user message
    tools: bool | None = None  # True: tools present; False: none
    max_tokens_at_least: int | None = None
    max_tokens_at_most: int | None = None
    thinking: Thinking | None = None
    thinking_token_budget: int | None = None
    mode: Mode | None = None


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Per-request thinking decisions, adaptive budgets and fleet-wide memory."""

    presets: tuple[str, ...] = ()  # built-in rules to enable: coding-no-think, math-think
    rules: tuple[PolicyRule, ...] = ()  # evaluated in order, before the presets
    adaptive_budget: bool = False  # budget = multiple x quantile of healthy thinking
    adaptive_quantile: float = 0.99
    adaptive_multiple: float = 3.0
    adaptive_window: int = 500  # healthy requests remembered per model and rule
    adaptive_min_samples: int = 20  # no adaptive budget before this many samples
    redis_url: str | None = None  # e.g. redis://10.0.0.5:6379/0 shares memory and budgets
    redis_prefix: str = "runaway-sidecar"
    redis_ttl_seconds: float = 86400.0  # how long unused thinking samples stay in Redis


@dataclass(frozen=True, slots=True)
class RecordConfig:
    """Recording traces of this node's own traffic for calibration (``sidecar.traces``):
    nothing is recorded unless ``dir`` is set. Watched requests in ``shadow`` or
    ``enforce`` mode are recorded: every detection, and per model and hour a sample of
    healthy requests and of requests that hit a budget."""

    dir: str | None = None  # directory of the trace files; None: nothing is recorded
    samples_per_hour: int = 4  # per model, of healthy requests and of budget hits each
    exclude_prompt: bool = True  # keep the request's prompt out of the records
    max_reasoning_chars: int = 262_144  # reasoning kept per stream (the rest is cut)
    file_bytes: int = 16 * 1024 * 1024  # a trace file is closed past this size
    max_bytes: int = 256 * 1024 * 1024  # the oldest trace files go past this total
    queue: int = 128  # records waiting for the writer; more are dropped and counted


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the sidecar reads at start-up and on SIGHUP."""

    upstream: str = "http://127.0.0.1:8001"  # the vLLM server the sidecar fronts
    # The upstream's kind: vllm | llamacpp | sglang | ollama, or auto (probed at start-up).
    dialect: DialectChoice = "vllm"
    listen: str = "127.0.0.1:8000"  # host:port clients connect to
    metrics_listen: str = "127.0.0.1:9464"  # host:port of /metrics, /healthz, /readyz
    mode: Mode = "enforce"  # enforce | cut | shadow | off
    log_format: LogFormat = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    model_allowlist: tuple[str, ...] = ()  # model names used as metric labels; others: "other"
    workers: int = 1  # processes sharing the listen port (SO_REUSEPORT)
    drain_timeout_seconds: float = 30.0  # SIGTERM: how long in-flight streams may finish
    # How often the --config file is checked for a change, which reloads it as SIGHUP
    # does (0: never). Catches a Kubernetes ConfigMap update (sidecar/service/config_watch.py).
    config_watch_seconds: float = 5.0
    upstream_connect_timeout_seconds: float = 10.0
    upstream_read_timeout_seconds: float = 300.0  # max silence between upstream bytes (0: none)
    # How long an idle upstream connection is kept for the next request (0: not kept). It
    # must stay below the upstream's own idle timeout (uvicorn, hence vLLM and SGLang: 5 s),
    # or a request may be written on a connection the upstream is closing.
    upstream_keepalive_seconds: float = 4.0
    max_body_bytes: int = 32 * 1024 * 1024  # larger client request bodies get a 413
    # A client connection must deliver a complete request head within this many seconds
    # of connecting (or of its previous response), else it is closed: this bounds
    # slowloris clients and idle keep-alive connections alike.
    client_header_timeout_seconds: float = 60.0
    # Longest silence between two bytes of a client request body; then 408.
    client_body_timeout_seconds: float = 60.0
    # Longest request line or header field; longer ones get a 400 before any handler runs.
    max_header_bytes: int = 8190
    api_key: str | None = None  # if set, clients must send "Authorization: Bearer <key>"
    # Agent loops across turns (docs/agent-loops.md): off | shadow | nudge | refuse.
    agent_loops: AgentLoopMode = "shadow"
    # Log the looping call's arguments (they may hold file contents or secrets).
    agent_loops_log_arguments: bool = False
    agent_loop_detector: LoopConfig = field(default_factory=LoopConfig)
    detectors: DetectorConfig = field(default_factory=DetectorConfig)
    reissue: ReissueConfig = field(default_factory=ReissueConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    models: tuple[ModelOverride, ...] = ()


TABLES: tuple[str, ...] = ("detectors", "reissue", "memory", "policy", "record",
                           "agent_loop_detector")
#: ``[detectors]`` keys a ``[[models]]`` entry may not set in its ``detectors`` table: the
#: entry's own fields of the same name set them.
_MODEL_OWN_KEYS = frozenset({"thinking_token_budget", "thinking_seconds_budget"})
PRESET_NAMES: tuple[str, ...] = ("coding-no-think", "math-think")


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Build a :class:`Config` from a TOML file, environment variables and flag values.

    ``overrides`` maps dotted keys (``"upstream"``, ``"detectors.stall_seconds"``) to the
    raw strings given on the command line.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for key, value in _env_values(env if env is not None else os.environ).items():
        _set_dotted(raw, key, value)
    for key, value in (overrides or {}).items():
        _set_dotted(raw, key, value)
    cfg: Config = build(Config, raw, "")
    if any(m.detectors for m in cfg.models):
        cfg = dataclasses.replace(cfg, models=tuple(
            dataclasses.replace(m, detectors=_detector_overrides(
                cfg.detectors, m.detectors, f"models[{i}].detectors"))
            for i, m in enumerate(cfg.models)))
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Cross-field checks that types alone cannot express."""
    if not re.match(r"^https?://[^/]+", cfg.upstream):
        raise ConfigError(f"key 'upstream': expected an http(s) URL, got {cfg.upstream!r}")
    for key in ("listen", "metrics_listen"):
        parse_host_port(getattr(cfg, key), key)
    if cfg.workers < 1:
        raise ConfigError("key 'workers': must be at least 1")
    if cfg.reissue.max_attempts < 1:
        raise ConfigError("key 'reissue.max_attempts': must be at least 1")
    if cfg.max_body_bytes < 1024:
        raise ConfigError("key 'max_body_bytes': must be at least 1024")
    if cfg.max_header_bytes < 1024:
        raise ConfigError("key 'max_header_bytes': must be at least 1024")
    for key in ("client_header_timeout_seconds", "client_body_timeout_seconds"):
        if not getattr(cfg, key) > 0:
            raise ConfigError(f"key '{key}': must be positive")
    for key in ("upstream_keepalive_seconds", "config_watch_seconds"):
        if not 0 <= getattr(cfg, key) < math.inf:
            raise ConfigError(f"key '{key}': must be 0 or more, and finite")
    ladders = [cfg.reissue.ladder, *(d.ladder for d in cfg.reissue.dialect_ladders)]
    for step in (s for ladder in ladders for s in ladder):
        if step not in ("no-think", "salvage") and not (
            step.startswith("fallback:") and len(step) > len("fallback:")
        ):
            raise ConfigError(
                f"key 'reissue.ladder': unknown step {step!r} "
                "(expected no-think, salvage or fallback:MODEL)"
            )
    for i, rule in enumerate(cfg.reissue.rules):
        _check_regex(rule.match, f"reissue.rules[{i}].match")
    for i, model in enumerate(cfg.models):
        _check_regex(model.match, f"models[{i}].match")
    _validate_record(cfg.record)
    policy = cfg.policy
    for name in policy.presets:
        if name not in PRESET_NAMES:
            raise ConfigError(f"key 'policy.presets': unknown preset {name!r} "
                              f"(expected one of {', '.join(PRESET_NAMES)})")
    for i, prule in enumerate(policy.rules):
        for key in ("model", "system", "last_user"):
            pattern = getattr(prule, key)
            if pattern is not None:
                _check_regex(pattern, f"policy.rules[{i}].{key}")
        for name, pattern in (prule.headers or {}).items():
            _check_regex(pattern, f"policy.rules[{i}].headers.{name}")
    if not 0 < policy.adaptive_quantile <= 1:
        raise ConfigError("key 'policy.adaptive_quantile': must be in (0, 1]")
    if policy.adaptive_multiple < 1 or policy.adaptive_window < 1:
        raise ConfigError("key 'policy.adaptive_multiple': must be >= 1 (and the window >= 1)")
    if policy.redis_url is not None and not re.match(r"^rediss?://", policy.redis_url):
        raise ConfigError("key 'policy.redis_url': expected redis:// or rediss:// URL")


def _validate_record(record: RecordConfig) -> None:
    """The ``[record]`` table's bounds (whether ``dir`` is writable is checked when the
    recorder starts)."""
    if record.dir is not None and not record.dir.strip():
        raise ConfigError("key 'record.dir': must be a directory path (or unset)")
    if record.samples_per_hour < 0:
        raise ConfigError("key 'record.samples_per_hour': must be 0 or more")
    if record.max_reasoning_chars < 1024:
        raise ConfigError("key 'record.max_reasoning_chars': must be at least 1024")
    if record.file_bytes < 4 * record.max_reasoning_chars + 65536:
        raise ConfigError("key 'record.file_bytes': must be at least 4 x "
                          "record.max_reasoning_chars + 65536 (a whole reasoning fits a file: "
                          f"{4 * record.max_reasoning_chars + 65536})")
    if record.max_bytes < 2 * record.file_bytes:
        raise ConfigError("key 'record.max_bytes': must be at least twice "
                          f"record.file_bytes ({2 * record.file_bytes})")
    if record.queue < 1:
        raise ConfigError("key 'record.queue': must be at least 1")


def parse_host_port(value: str, key: str = "listen") -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` allowed) or raise ``ConfigError`` naming ``key``."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise ConfigError(f"key '{key}': expected host:port, got {value!r}")
    return host.strip("[]"), int(port)


def option_keys() -> list[tuple[str, Any]]:
    """Every scalar option as (dotted key, type): drives the flags, env vars and docs."""
    hints = typing.get_type_hints(Config)
    keys: list[tuple[str, Any]] = []
    for f in dataclasses.fields(Config):
        if f.name in TABLES:
            sub = hints[f.name]
            sub_hints = typing.get_type_hints(sub)
            keys += [(f"{f.name}.{g.name}", sub_hints[g.name]) for g in dataclasses.fields(sub)
                     if is_scalar(sub_hints[g.name])]
        elif is_scalar(hints[f.name]):
            keys.append((f.name, hints[f.name]))
    return keys


def _env_values(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, _ in option_keys():
        name = ENV_PREFIX + key.replace(".", "_").upper()
        if name in env:
            out[key] = env[name]
    return out


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    table, _, name = key.rpartition(".")
    target = raw
    if table:
        sub = raw.setdefault(table, {})
        if not isinstance(sub, dict):
            raise ConfigError(f"key '{table}': expected a table")
        target = sub
    target[name] = value


def _detector_overrides(base: DetectorConfig, raw: Mapping[str, Any],
                        key: str) -> dict[str, Any]:
    """A ``[[models]]`` entry's ``detectors`` table, each value coerced to the type of its
    ``[detectors]`` field, and the chain they make with ``base`` built once to check it."""
    if not raw:
        return {}
    hints = typing.get_type_hints(DetectorConfig)
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name in _MODEL_OWN_KEYS:
            raise ConfigError(f"key '{key}.{name}': set it on the [[models]] entry itself")
        if name not in hints:
            raise ConfigError(f"unknown key '{key}.{name}' (expected a [detectors] key)")
        out[name] = coerce(hints[name], value, f"{key}.{name}")
    try:
        default_chain(dataclasses.replace(base, **out))
    except ValueError as exc:
        raise ConfigError(f"key '{key}': {exc}") from None
    return out


def _check_regex(pattern: str, key: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"key '{key}': invalid regex: {exc}") from None


def model_override(cfg: Config, model: str) -> ModelOverride | None:
    """The first ``[[models]]`` entry whose pattern matches ``model``."""
    for entry in cfg.models:
        if re.search(entry.match, model, re.IGNORECASE):
            return entry
    return None
