"""Agent loops across turns through the sidecar, against the simulated node (issue 39):
what the node gets and what the client gets in each mode, on chat completions, messages
and responses; the metric and the log line; a healthy agent conversation unchanged."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import structlog

from sidecar.config import ModelOverride
from sidecar.core.agent_loops import NOTE_MARK
from sidecar.obs.logs import configure_logging
from tests.detectors.test_agent_history import chat_body, messages_body, responses_body
from tests.stack import Stack, StackFactory

Builder = Callable[[int], dict[str, Any]]
CASES = [("chat", "/v1/chat/completions", chat_body),
         ("messages", "/v1/messages", messages_body),
         ("responses", "/v1/responses", responses_body)]
IDS = [c[0] for c in CASES]
MODEL = "sim-healthy"


def request(build: Builder, n: int, *, stream: bool = True) -> bytes:
    """A client's agent request with ``n`` identical Grep calls, as its bytes."""
    return orjson.dumps({**build(n), "model": MODEL, "stream": stream, "max_tokens": 200})


async def send(stack: Stack, path: str, raw: bytes, headers: dict[str, str] | None = None,
               *, direct: bool = False) -> tuple[int, bytes]:
    url = (stack.sim_url if direct else stack.url) + path
    status, _, data = await post_raw(url, raw, headers or {})
    return status, data


async def post_raw(url: str, raw: bytes, headers: dict[str, str]
                   ) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s, s.post(
            url, data=raw, headers={"Content-Type": "application/json", **headers}) as r:
        return r.status, dict(r.headers), await r.read()


def loops(stack: Stack, route: str, action: str, kind: str = "repeat") -> float:
    return stack.metric("runaway_sidecar_agent_loops_total", route=route, model=MODEL,
                        kind=kind, action=action)


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    """The sidecar's log lines, captured, undone after."""
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    stream = io.StringIO()
    configure_logging("json", "info", stream)
    yield stream
    structlog.reset_defaults()
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
    root.setLevel(level)


def events(stream: io.StringIO, name: str) -> list[dict[str, Any]]:
    return [e for e in map(orjson.loads, stream.getvalue().splitlines())
            if e.get("event") == name]


_VOLATILE = re.compile(
    rb'"(id|created|created_at|signature|item_id|response_id|call_id|'
    rb'system_fingerprint)":("[^"]*"|[0-9.]+)')


def normalized(data: bytes) -> bytes:
    """A response with the ids and times the simulator draws afresh each time masked."""
    return _VOLATILE.sub(rb'"\1":"x"', data)


@pytest.mark.parametrize(("route", "path", "build"), CASES, ids=IDS)
async def test_shadow_by_default_counts_logs_and_changes_nothing(
        make_stack: StackFactory, log_output: io.StringIO, route: str, path: str,
        build: Builder) -> None:
    """Default (shadow): the node gets the client's very bytes, the client its answer;
    the loop is counted and logged with its evidence, without the arguments."""
    stack = await make_stack(tap=True)
    raw = request(build, 8)
    status, _ = await send(stack, path, raw)
    assert status == 200
    assert stack.tap is not None
    assert stack.tap.bodies == [raw]
    assert loops(stack, route, "shadow") == 1
    (line,) = events(log_output, "agent_loop")
    assert (line["route"], line["kind"], line["action"]) == (route, "repeat", "shadow")
    assert (line["calls"], line["count"]) == (["Grep"], 8)
    assert len(line["indices"]) == 8
    assert "arguments" not in line
    assert b"parse_rows" not in log_output.getvalue().encode()


async def test_the_log_line_carries_the_requests_id(
        make_stack: StackFactory, log_output: io.StringIO) -> None:
    """The agent_loop line names the request as its access line does: the client's
    X-Request-Id, or the id the sidecar drew when the client sent none."""
    stack = await make_stack()
    await send(stack, "/v1/chat/completions", request(chat_body, 6))
    await send(stack, "/v1/chat/completions", request(chat_body, 6),
               {"X-Request-Id": "req-from-agent"})
    drawn, given = events(log_output, "agent_loop")
    first, second = events(log_output, "access")
    assert drawn["request_id"] != ""
    assert drawn["request_id"] == first["request_id"]
    assert given["request_id"] == second["request_id"] == "req-from-agent"


async def test_arguments_are_logged_when_configured(
        make_stack: StackFactory, log_output: io.StringIO) -> None:
    """agent_loops_log_arguments puts the call's canonical arguments in the log line."""
    stack = await make_stack(agent_loops_log_arguments=True)
    await send(stack, "/v1/chat/completions", request(chat_body, 6))
    (line,) = events(log_output, "agent_loop")
    assert line["arguments"] == ['{"path":".","pattern":"parse_rows"}']


@pytest.mark.parametrize(("route", "path", "build"), CASES, ids=IDS)
async def test_nudge_adds_one_note_once(make_stack: StackFactory, route: str, path: str,
                                        build: Builder) -> None:
    """nudge: the request that reaches 6 identical calls goes upstream with one note, and
    the answer reaches the client; the 7th goes as it came."""
    stack = await make_stack(tap=True, agent_loops="nudge")
    assert stack.tap is not None
    status, _ = await send(stack, path, request(build, 6))
    assert status == 200
    (sent,) = stack.tap.bodies
    assert sent.count(NOTE_MARK.encode()) == 1
    assert loops(stack, route, "nudge") == 1
    seventh = request(build, 7)
    status, _ = await send(stack, path, seventh)
    assert status == 200
    assert stack.tap.bodies[1] == seventh
    assert loops(stack, route, "passed") == 1


@pytest.mark.parametrize(("route", "path", "build"), CASES, ids=IDS)
async def test_refuse_answers_400_in_the_apis_shape(
        make_stack: StackFactory, route: str, path: str, build: Builder) -> None:
    """refuse (here per request, X-Agent-Loops): a 400 in the API's error shape with the
    sidecar's message; nothing goes upstream; counted as rejected."""
    stack = await make_stack(tap=True)
    status, data = await send(stack, path, request(build, 7), {"X-Agent-Loops": "refuse"})
    assert status == 400
    error = orjson.loads(data)
    if route == "messages":
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        message = error["error"]["message"]
    else:
        message = error["error"]["message"]
        assert error["error"]["code"] == 400
    assert message.startswith("runaway-sidecar stopped an agent loop")
    assert "`Grep` 7 times" in message
    assert stack.tap is not None
    assert stack.tap.bodies == []
    assert loops(stack, route, "refuse") == 1
    assert stack.metric("runaway_sidecar_requests_total", route=route, model=MODEL,
                        outcome="rejected") == 1


async def test_per_model_setting_and_a_bad_header(make_stack: StackFactory) -> None:
    """A [[models]] entry sets the action for its models; a bad header value is a 400."""
    stack = await make_stack(models=(ModelOverride(match="sim-", agent_loops="refuse"),))
    status, _ = await send(stack, "/v1/chat/completions", request(chat_body, 6))
    assert status == 400
    status, data = await send(stack, "/v1/chat/completions", request(chat_body, 2),
                              {"X-Agent-Loops": "maybe"})
    assert status == 400
    assert orjson.loads(data)["error"]["param"] == "X-Agent-Loops"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize(("route", "path", "build"), CASES, ids=IDS)
async def test_a_healthy_agent_conversation_is_unchanged(
        make_stack: StackFactory, route: str, path: str, build: Builder,
        stream: bool) -> None:
    """A healthy agent conversation (calls below the threshold) under nudge: the node
    gets the client's bytes, and the client the node's answer, byte for byte but for
    the ids and times the simulator draws afresh."""
    stack = await make_stack(tap=True, agent_loops="nudge")
    raw = request(build, 4, stream=stream)
    status, proxied = await send(stack, path, raw)
    direct_status, direct = await send(stack, path, raw, direct=True)
    assert status == direct_status == 200
    assert stack.tap is not None
    assert stack.tap.bodies[0] == raw or not stream  # a body request is sent as a stream
    assert normalized(proxied) == normalized(direct)
    counted = [line for line in stack.sidecar_metrics_text().splitlines()
               if line.startswith("runaway_sidecar_agent_loops_total{")]
    assert counted  # the series start at 0
    assert all(line.endswith(" 0.0") for line in counted)
