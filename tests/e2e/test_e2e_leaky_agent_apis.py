"""Real vLLM, leaky model (loops in content with thinking off), the coding-agent APIs: the
ladder ends in one well-formed message or response cut at the length limit, and a client
leaving during the thinking-off reissue stops vLLM.

Sidecar config from scripts/e2e-vllm.sh (``[e2e]``): ``reissue.ladder = ["no-think",
"salvage"]``, ``reissue.max_attempts = 3``. ``/v1/messages`` and ``/v1/responses`` have no
salvage step, which the ladder then takes as a thinking-off step: thinking off twice, then the
end.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.vllm

MAX_TOKENS = 8000
APIS = ("messages", "responses")

@pytest.mark.parametrize("api", APIS)
def test_ladder_ends_at_the_length_limit(leaky_node, api, e2e_report) -> None:
    """Thinking loops, thinking off loops in the answer (twice): the client gets one
    well-formed stream that ends as a length stop, and vLLM idles."""
    before, _ = leaky_node.wait_idle()
    raw = leaky_node.agent_raw(api, stream=True,
                               **leaky_node.agent_turn(api, f"{api}-ladder"))
    after, _ = leaky_node.wait_idle(timeout=2.0)
    time.sleep(0.5)
    generated = after.generation_tokens - before.generation_tokens
    wire = leaky_node.wire
    if api == "messages":
        got = wire.MessagesStream.of(raw.body)
        answer = got.text("text")
        assert [b.kind for b in got.blocks] == ["thinking", "text", "text"]
        assert got.stop_reason == "max_tokens"
    else:
        got = wire.ResponsesStream.of(raw.body)
        answer = got.text("message")
        assert [(b.kind, b.status) for b in got.items] == [
            ("reasoning", "incomplete"), ("message", "incomplete"), ("message", "incomplete")]
        assert got.final["status"] == "incomplete"
        assert got.final["incomplete_details"] == {"reason": "max_output_tokens"}
    e2e_report(f"{api}_leaky_ladder", generation_tokens_delta=generated,
               comments=got.parsed.comments, client_usage=got.usage)
    assert got.problems == []
    assert wire.actions(got.parsed.comments) == ["reissue:no-think", "reissue:no-think",
                                                 "finish"]
    assert answer.startswith(leaky_node.script["answer"])
    assert leaky_node.metrics().generation_tokens == after.generation_tokens
    # Three cut attempts cost less than one uncut runaway, and the usage is honest.
    assert got.usage["output_tokens"] <= generated < MAX_TOKENS


@pytest.mark.parametrize("api", APIS)
def test_disconnect_during_reissue_stops_vllm(leaky_node, api, spawn_sidecar,
                                              budget_only_config, e2e_report) -> None:
    """A client leaving while the thinking-off reissue streams makes vLLM abort it too."""
    url = spawn_sidecar(leaky_node, budget_only_config)
    resource = leaky_node.agent_client(api, base_url=url)
    kind = "text_delta" if api == "messages" else "response.output_text.delta"

    def start(tag: str) -> Any:
        return resource.create(model=leaky_node.model, stream=True,
                               **leaky_node.agent_turn(api, tag))

    def fifteen_answer_deltas(events: list[Any]) -> bool:
        # The first attempt is reasoning only: answer text means the reissue is streaming.
        return sum(1 for e in events if e.type == kind or (
            e.type == "content_block_delta" and e.delta.type == kind)) >= 15

    stream, before, tries = leaky_node.midway_events(f"{api}-disconnect-reissue", start,
                                                     fifteen_answer_deltas)
    stream.close()
    after, waited = leaky_node.wait_idle(timeout=1.0)
    time.sleep(0.5)
    settled = leaky_node.metrics()
    assert settled.generation_tokens == after.generation_tokens
    assert settled.success == before.success  # both attempts aborted, none finished
    assert after.generation_tokens - before.generation_tokens < MAX_TOKENS // 2
    e2e_report(f"{api}_disconnect_during_reissue", tries=tries,
               idle_after_seconds=round(waited, 3),
               generation_tokens_delta=after.generation_tokens - before.generation_tokens)
