"""``runaway-sidecar demo``: the field case through each API's official SDK, end to end."""

from __future__ import annotations

import io
import re

import pytest

from sidecar.service import cli
from sidecar.service.demo import APIS, DemoApi, run_demo
from sidecar.simulator.engine.behaviours import FIX_ANSWER

#: Fast enough that the loop is cut within a fraction of a second (at 213 tokens).
RATE = 1500.0
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
         "responses": "/v1/responses"}
SDKS = {"chat": "openai", "messages": "anthropic", "responses": "openai"}
PATCHES = {"chat": '{"reasoning_effort":"none"}', "messages": '{"thinking":{"type":"disabled"}}',
           "responses": '{"reasoning":{"effort":"none"}}'}


@pytest.mark.parametrize("api", APIS)
def test_demo_cuts_and_answers_through_each_sdk(api: DemoApi) -> None:
    """The demo sends the looping request through the API's SDK; a detector cuts it on
    the thinking channel, the thinking-off reissue's answer reaches the client, the node
    stops generating, and the summary compares the time with max_tokens at the measured
    rate."""
    out = io.StringIO()
    code = run_demo(tokens_per_second=RATE, max_tokens=8192, out=out, api=api,
                    probe_seconds=0.3)
    text = out.getvalue()
    assert code == 0, text
    assert f"POST {PATHS[api]} through the {SDKS[api]} SDK" in text
    reasoning = int(re.findall(r"thinking streamed: (\d+) reasoning tokens, then the loop "
                               r"was cut", text)[0])
    assert reasoning > 0
    assert re.search(r"detector \w+ fired on the thinking channel \(enforce mode\)", text), text
    assert re.search(r"detection point: [1-9]\d* tokens", text), text
    assert f"with {PATCHES[api]} merged in" in text
    assert f"answer: {''.join(FIX_ANSWER).strip()!r}" in text
    first, done = map(float, re.findall(r"first answer token after ([\d.]+) s, complete after "
                                        r"([\d.]+) s", text)[0])
    assert first <= done
    generated = int(re.findall(r"generation_tokens_total=(\d+)", text)[0])
    assert "num_requests_running=0," in text
    assert 0 < generated < 8192  # the loop was cut long before max_tokens
    usage = int(re.findall(r"all attempts\): (\d+) output tokens", text)[0])
    # Both attempts' tokens, as far as the sidecar read them before the cut (the node
    # may have generated a few more by the time it saw the disconnect).
    assert reasoning < usage <= generated
    limit = "max_output_tokens" if api == "responses" else "max_tokens"
    rate = float(re.findall(rf"the loop runs to {limit}: 8192 tokens at the measured "
                            r"(\d+) tok/s", text)[0])
    assert 0 < rate <= RATE * 1.1
    assert re.search(r"a complete answer in [\d.]+ s \([\d.]+% of the time\)", text), text


def test_demo_command_line_takes_the_api() -> None:
    """``demo --api`` offers exactly the demo's APIs and defaults to chat."""
    parser = cli.build_parser()
    assert parser.parse_args(["demo"]).api == "chat"
    for api in APIS:
        assert parser.parse_args(["demo", "--api", api]).api == api
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--api", "completions"])
