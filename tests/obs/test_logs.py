"""Tests for sidecar.obs.logs: JSON lines, redaction of secrets and text, access and
runaway fields."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
import structlog

from detectors.base import Evidence, Verdict
from sidecar.obs.logs import (
    REDACTED,
    access_log_fields,
    configure_logging,
    runaway_log_fields,
)

SECRETS = ["sk-live-0123456789abcdef", "session=deadbeefcafe", "hunter2-password"]
PROMPT = "Please fix the bug in my payroll module"


@pytest.fixture
def out() -> Iterator[io.StringIO]:
    """A JSON logging configuration writing to a buffer, undone after the test."""
    root = logging.getLogger()
    level = root.level
    before = list(root.handlers)
    stream = io.StringIO()
    configure_logging("json", "info", stream)
    yield stream
    structlog.reset_defaults()
    for h in list(root.handlers):
        if h not in before:
            root.removeHandler(h)
    root.setLevel(level)


def fail(exc: Exception) -> None:
    raise exc


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_have_iso_timestamp_level_and_event(out: io.StringIO) -> None:
    """Each event is one JSON object with an ISO-8601 UTC timestamp, level and event."""
    log = structlog.get_logger()
    log.info("started", port=8000)
    log.warning("slow", seconds=1.5)
    (a, b) = lines(out)
    assert a["event"] == "started"
    assert a["level"] == "info"
    assert a["port"] == 8000
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", str(a["timestamp"]))
    assert b["level"] == "warning"


def test_level_filters_lower_events(out: io.StringIO) -> None:
    """At level info, debug events are not written."""
    structlog.get_logger().debug("noise")
    structlog.get_logger().info("signal")
    assert [e["event"] for e in lines(out)] == ["signal"]


def test_secrets_and_prompts_never_reach_the_output(out: io.StringIO) -> None:
    """Headers, keys, cookies and prompt/completion text sent through the logger are
    absent from the output, whatever shape they are logged in."""
    log = structlog.get_logger()
    log.info(
        "request",
        authorization=f"Bearer {SECRETS[0]}",
        headers={"Authorization": f"Bearer {SECRETS[0]}", "Cookie": SECRETS[1]},
        header_pairs=[("Set-Cookie", SECRETS[1]), ("X-Api-Key", SECRETS[0])],
        api_key=SECRETS[0],
        x_api_key=SECRETS[0],
        proxy_authorization=f"Basic {SECRETS[2]}",
        password=SECRETS[2],
        messages=[{"role": "user", "content": PROMPT}],
        prompt=PROMPT,
        completion=PROMPT,
        body=PROMPT.encode(),
        nested={"deeper": {"request": {"messages": PROMPT, "Cookie": SECRETS[1]}}},
    )
    log.info(f"retrying with Bearer {SECRETS[0]} header")
    text = out.getvalue()
    for secret in [*SECRETS, PROMPT]:
        assert secret not in text
    (event, message) = lines(out)
    assert event["authorization"] == REDACTED
    assert event["headers"] == {"Authorization": REDACTED, "Cookie": REDACTED}
    assert event["header_pairs"] == [["Set-Cookie", REDACTED], ["X-Api-Key", REDACTED]]
    assert event["messages"] == REDACTED
    assert event["body"] == REDACTED
    assert message["event"] == f"retrying with Bearer {REDACTED} header"


def test_unknown_bytes_are_replaced_by_their_length(out: io.StringIO) -> None:
    """A bytes value under an innocent key is logged as its length only."""
    structlog.get_logger().info("chunk", raw=PROMPT.encode())
    (event,) = lines(out)
    assert event["raw"] == f"[{len(PROMPT)} bytes]"


def test_long_values_are_cut(out: io.StringIO) -> None:
    """Any string value is cut to 1,000 characters plus a marker."""
    structlog.get_logger().info("big", note="x" * 5000)
    (event,) = lines(out)
    assert str(event["note"]).startswith("x" * 1000 + "...[+4000 chars]")


def test_stdlib_records_are_redacted_too(out: io.StringIO) -> None:
    """Records from libraries using logging (aiohttp, asyncio) pass the same redaction."""
    logging.getLogger("aiohttp.server").error("upstream said Bearer %s", SECRETS[0])
    text = out.getvalue()
    assert SECRETS[0] not in text
    (event,) = lines(out)
    assert event["level"] == "error"
    assert event["logger"] == "aiohttp.server"
    assert event["event"] == f"upstream said Bearer {REDACTED}"


def test_exception_traceback_is_redacted(out: io.StringIO) -> None:
    """A traceback is written as text, with credentials in its message redacted."""
    try:
        fail(ValueError(f"rejected Bearer {SECRETS[0]}"))
    except ValueError:
        structlog.get_logger().exception("failed")
    (event,) = lines(out)
    assert "ValueError: rejected Bearer [redacted]" in str(event["exception"])
    assert SECRETS[0] not in out.getvalue()


def test_evidence_excerpt_is_cut_to_200_chars(out: io.StringIO) -> None:
    """The evidence excerpt, the only model text that is logged, stays within 200 chars."""
    structlog.get_logger().warning("runaway", evidence="ab" * 400)
    structlog.get_logger().warning("runaway", evidence={"excerpt": "cd" * 400, "count": 9})
    (a, b) = lines(out)
    assert str(a["evidence"]).startswith("ab" * 100)
    assert len(str(a["evidence"]).split("...")[0]) == 200
    assert isinstance(b["evidence"], dict)
    assert len(str(b["evidence"]["excerpt"]).split("...")[0]) == 200
    assert b["evidence"]["count"] == 9


def test_runaway_event_fields(out: io.StringIO) -> None:
    """The runaway event carries request id, model, detector, tokens, seconds and a short
    evidence excerpt."""
    verdict = Verdict(
        detector="periodic",
        channel="thinking",
        reason="period 37 seen 6 times",
        evidence=Evidence(excerpt="Wait, let me re-check. " * 20, period=23, count=6),
        at_token=912,
        at_char=3650,
    )
    fields = runaway_log_fields(
        verdict, request_id="req-1", model="qwen3", seconds=14.04, mode="enforce", attempt=0
    )
    structlog.get_logger().warning("runaway", **fields)
    (event,) = lines(out)
    assert event["request_id"] == "req-1"
    assert event["model"] == "qwen3"
    assert event["detector"] == "periodic"
    assert event["channel"] == "thinking"
    assert event["tokens"] == 912
    assert event["seconds"] == 14.04
    ev = event["evidence"]
    assert isinstance(ev, dict)
    assert ev["period"] == 23
    assert ev["count"] == 6
    assert str(ev["excerpt"]).startswith("Wait, let me re-check.")
    assert len(str(ev["excerpt"]).split("...[+")[0]) == 200


def test_access_line_fields(out: io.StringIO) -> None:
    """The access line has the agreed fields and drops the query string."""
    fields = access_log_fields(
        method="POST",
        path="/v1/chat/completions?api_key=" + SECRETS[0],
        status=200,
        route="chat",
        outcome="reissued",
        model="qwen3",
        request_id="req-2",
        duration_s=3.2500001,
        bytes_sent=4096,
        upstream_status=200,
    )
    structlog.get_logger().info("access", **fields)
    (event,) = lines(out)
    assert event == {
        "event": "access",
        "level": "info",
        "timestamp": event["timestamp"],
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "route": "chat",
        "outcome": "reissued",
        "model": "qwen3",
        "request_id": "req-2",
        "duration_s": 3.25,
        "bytes": 4096,
        "upstream_status": 200,
    }
    assert SECRETS[0] not in out.getvalue()


def test_console_format_redacts_and_renders_plain() -> None:
    """The console format writes readable lines with the same redaction."""
    stream = io.StringIO()
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        configure_logging("console", "debug", stream)
        log = structlog.get_logger()
        log.debug("hello", authorization=f"Bearer {SECRETS[0]}", prompt=PROMPT, port=1)
        try:
            fail(RuntimeError("boom"))
        except RuntimeError:
            log.exception("failed")
    finally:
        structlog.reset_defaults()
        for h in list(root.handlers):
            if h not in before:
                root.removeHandler(h)
        root.setLevel(level)
    text = stream.getvalue()
    assert "hello" in text
    assert "port=1" in text
    assert "RuntimeError: boom" in text
    assert "\x1b[" not in text  # no colour codes when the stream is not a terminal
    assert SECRETS[0] not in text
    assert PROMPT not in text


def test_unknown_level_is_refused() -> None:
    """A misspelt level is a ValueError, not a silent default."""
    with pytest.raises(ValueError, match="verbose"):
        configure_logging("json", "verbose", io.StringIO())


def test_reconfigure_replaces_the_stdlib_handler(out: io.StringIO) -> None:
    """Configuring twice leaves one sidecar handler on the root logger."""
    second = io.StringIO()
    configure_logging("json", "info", second)
    logging.getLogger("x").warning("once")
    assert out.getvalue() == ""
    assert len(second.getvalue().splitlines()) == 1
