"""Logging: structlog JSON lines on stdout (journald keeps them), with secrets redacted.

:func:`configure_logging` is called once by the CLI. Every event, ours and those of
libraries that use the standard :mod:`logging` module (aiohttp, asyncio), passes
through :func:`redact` before it is rendered:

- values under secret keys (``authorization``, ``cookie``, ``set-cookie``,
  ``proxy-authorization``, ``api_key``, ``x-api-key``, ...) become ``[redacted]``, at
  any depth of nested mappings, lists and ``(name, value)`` header pairs;
- values under text keys (``messages``, ``prompt``, ``content``, ``reasoning``,
  ``text``, ``body``, ...) become ``[redacted]``: prompts and completions are never
  logged. The exceptions are the runaway ``evidence`` excerpt, cut to 200 characters,
  and an agent loop's ``arguments`` and ``excerpt`` when ``agent_loops_log_arguments``
  is set;
- ``Bearer``/``Basic`` credentials inside any string become ``[redacted]``;
- bytes are replaced by their length, and any other string is cut to 1,000 characters
  (8,000 for tracebacks) so that a stray body cannot flood the journal.

Exception tracebacks are rendered as plain text without local variables, since locals
can hold headers and bodies.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, Final, TextIO

import orjson
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from detectors.agent_loops import LoopFinding
from detectors.base import Verdict
from sidecar.labels import LogFormat

__all__ = [
    "REDACTED",
    "access_log_fields",
    "agent_loop_log_fields",
    "configure_logging",
    "redact",
    "runaway_log_fields",
]

REDACTED: Final = "[redacted]"
EVIDENCE_MAX_CHARS: Final = 200
VALUE_MAX_CHARS: Final = 1_000
TRACEBACK_MAX_CHARS: Final = 8_000
_MAX_DEPTH: Final = 6

# Keys are compared lower-cased with "_" read as "-".
SECRET_KEYS: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "api-key",
        "apikey",
        "x-api-key",
        "password",
        "secret",
        "client-secret",
        "access-token",
        "refresh-token",
    }
)
TEXT_KEYS: Final = frozenset(
    {
        "messages",
        "prompt",
        "prompts",
        "completion",
        "content",
        "reasoning",
        "reasoning-content",
        "text",
        "body",
        "input",
        "choices",
        "delta",
        "tool-calls",
    }
)
_EVIDENCE_KEYS: Final = frozenset({"evidence", "excerpt"})
# Left for the renderer: the console renderer formats exc_info itself, and keys that
# start with "_" ("_record", "_from_structlog") belong to structlog.
_RENDERER_KEYS: Final = frozenset({"exc_info", "stack_info"})
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)\s+[^\s\"',;]+")


def _norm(key: object) -> str:
    return str(key).lower().replace("_", "-")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[+{len(text) - limit} chars]"


def _scrub_str(text: str, limit: int = VALUE_MAX_CHARS) -> str:
    return _cut(_CREDENTIAL.sub(lambda m: f"{m.group(1)} {REDACTED}", text), limit)


def _scrub(key: str, value: object, depth: int) -> object:
    """The loggable form of ``value`` found under the normalized ``key``."""
    if key in SECRET_KEYS or key in TEXT_KEYS:
        return REDACTED
    if key in _EVIDENCE_KEYS:
        return _evidence(value)
    if isinstance(value, str):
        return _scrub_str(value)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return f"[{len(value)} bytes]"
    if depth >= _MAX_DEPTH:
        return "[nested]"
    if isinstance(value, Mapping):
        return {str(k): _scrub(_norm(k), v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if len(items) == 2 and isinstance(items[0], str) and _norm(items[0]) in SECRET_KEYS:
            return [items[0], REDACTED]  # a ("Authorization", "...") header pair
        return [_scrub("", v, depth + 1) for v in items[:50]]
    return _scrub_str(repr(value))


def _evidence(value: object) -> object:
    """The evidence excerpt is model output: allowed, but only 200 characters of it."""
    if isinstance(value, str):
        return _scrub_str(value, EVIDENCE_MAX_CHARS)
    excerpt = getattr(value, "excerpt", None)
    if isinstance(excerpt, str):
        return {
            "excerpt": _scrub_str(excerpt, EVIDENCE_MAX_CHARS),
            "period": getattr(value, "period", None),
            "count": getattr(value, "count", None),
        }
    if isinstance(value, Mapping):
        return {
            str(k): _scrub_str(v, EVIDENCE_MAX_CHARS)
            if _norm(k) == "excerpt" and isinstance(v, str)
            else _scrub(_norm(k), v, 1)
            for k, v in value.items()
        }
    return REDACTED


def redact(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: make ``event_dict`` safe to write (see the module docstring)."""
    for key in list(event_dict):
        value = event_dict[key]
        if key == "event" and isinstance(value, str):
            event_dict[key] = _scrub_str(value)
        elif key == "exception" and isinstance(value, str):
            event_dict[key] = _scrub_str(value, TRACEBACK_MAX_CHARS)
        elif key not in _RENDERER_KEYS and not key.startswith("_"):
            event_dict[key] = _scrub(_norm(key), value, 0)
    return event_dict


def _json_dumps(obj: Any, **_kw: Any) -> str:
    return orjson.dumps(obj, default=repr).decode()


class _SidecarHandler(logging.StreamHandler[TextIO]):
    """Marks the root handler we installed, so a second configure replaces it."""


def configure_logging(fmt: LogFormat, level: str, stream: TextIO = sys.stdout) -> None:
    """Configure structlog and the standard library root logger to write to ``stream``.

    ``fmt="json"``: one JSON object per line with ``timestamp`` (ISO 8601, UTC),
    ``level`` and ``event``. ``fmt="console"``: aligned, readable lines for humans.
    ``level`` is a standard level name (``debug``, ``info``, ``warning``, ``error``).
    Safe to call again (tests do): it replaces the previous configuration.
    """
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor
    if fmt == "json":
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer(serializer=_json_dumps)
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=stream.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    shared.append(redact)

    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        # Not cached: a reconfigure (tests, or a future log-level reload) must reach
        # loggers bound at import time. One access line per request makes this cheap.
        cache_logger_on_first_use=False,
    )

    handler = _SidecarHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _SidecarHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # The sidecar writes its own access line; aiohttp's would repeat it with the
    # query string, which can carry keys.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def access_log_fields(
    *,
    method: str,
    path: str,
    status: int,
    route: str,
    outcome: str,
    model: str | None,
    request_id: str,
    duration_s: float,
    bytes_sent: int,
    upstream_status: int | None,
) -> dict[str, object]:
    """Fields of the one ``access`` line per request, written when the response ends.

    Usage: ``log.info("access", **access_log_fields(...))``. The query string is dropped
    from ``path`` because it can carry credentials. ``upstream_status`` is ``None`` when
    the upstream never answered.
    """
    return {
        "method": method,
        "path": path.split("?", 1)[0],
        "status": status,
        "route": route,
        "outcome": outcome,
        "model": model,
        "request_id": request_id,
        "duration_s": round(duration_s, 6),
        "bytes": bytes_sent,
        "upstream_status": upstream_status,
    }


def agent_loop_log_fields(finding: LoopFinding, *, action: str, reason: str, route: str,
                          model: str | None, request_id: str,
                          arguments: bool) -> dict[str, object]:
    """Fields of the one ``agent_loop`` event per request whose history shows a loop: the
    evidence (kind, the calls' names, the count, the history indices of the repeated
    calls or turns). The calls' arguments and a text loop's excerpt only with
    ``arguments`` (``agent_loops_log_arguments``): they may hold file contents or
    secrets."""
    fields: dict[str, object] = {
        "request_id": request_id, "route": route, "model": model, "kind": finding.kind,
        "action": action, "calls": [call.name for call in finding.calls],
        "count": finding.count, "indices": list(finding.indices),
    }
    if reason:
        fields["reason"] = reason
    if arguments:
        fields["arguments"] = [call.arguments[:EVIDENCE_MAX_CHARS] for call in finding.calls]
        if finding.excerpt:
            fields["excerpt"] = finding.excerpt
    return fields


def runaway_log_fields(
    verdict: Verdict,
    *,
    request_id: str,
    model: str | None,
    seconds: float,
    mode: str,
    attempt: int,
) -> dict[str, object]:
    """Fields of the one ``runaway`` event per detection.

    Usage: ``log.warning("runaway", **runaway_log_fields(...))``. ``seconds`` runs from
    the start of the attempt to the verdict; ``attempt`` is 0 for the original request
    and counts reissues after it. The evidence excerpt is cut to 200 characters here
    and again by :func:`redact`.
    """
    ev = verdict.evidence
    return {
        "request_id": request_id,
        "model": model,
        "detector": verdict.detector,
        "channel": verdict.channel,
        "reason": verdict.reason,
        "mode": mode,
        "attempt": attempt,
        "tokens": verdict.at_token,
        "chars": verdict.at_char,
        "seconds": round(seconds, 3),
        "evidence": {
            "excerpt": _cut(ev.excerpt, EVIDENCE_MAX_CHARS),
            "period": ev.period,
            "count": ev.count,
        },
    }
