"""Real llama.cpp: a client that goes away frees the server's slot, in either attempt.

The proof is llama-server's own ``GET /slots``: the slot is ``is_processing`` while the
client reads, and no longer shortly after the client closes its stream; and
``llamacpp:tokens_predicted_total`` shows the request ended far below ``max_tokens``.

Both tests run an extra sidecar whose loop detectors are off, so nothing but the client
ends an attempt early: the first attempt then runs until the client leaves, and in the
second test the sidecar's thinking budget (``X-Thinking-Budget``) cuts the first attempt
at a known point and the leaky model's thinking-off reissue loops in content until the
client leaves. (With the detectors on, the sidecar might cut first and the test would
race it.)
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.llamacpp

MAX_TOKENS = 4000
#: How soon after the client closes the slot must be free (seconds): llama.cpp stops a
#: request when writing its next chunk fails, which is within a token or two.
FREED_WITHIN = 1.0

NO_LOOP_DETECTORS = """\
# [e2e-llamacpp-disconnect] Only the client (or a thinking budget) ends an attempt early.
mode = "enforce"
dialect = "llamacpp"
[detectors]
periodic_enabled = false
recurrence_enabled = false
[reissue]
ladder = ["no-think"]
max_attempts = 2
[memory]
enabled = false
"""


def _read_until(stream, ready) -> list:
    """Chunks of ``stream`` up to the one that makes ``ready`` true (the stream stays open)."""
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        if ready(chunks):
            return chunks
    pytest.fail(f"the stream ended after {len(chunks)} chunks, before the test could close it")


def _reasoning(chunk) -> str:
    return "".join((c.delta.model_extra or {}).get("reasoning_content") or ""
                   for c in chunk.choices)


def _content(chunk) -> str:
    return "".join(c.delta.content or "" for c in chunk.choices)


def test_disconnect_during_first_attempt_frees_the_slot(loop_node, spawn_sidecar,
                                                        e2e_report) -> None:
    """Closing the client stream in the middle of the thinking loop frees the slot."""
    url = spawn_sidecar(loop_node, NO_LOOP_DETECTORS)
    loop_node.wait_idle()
    before = loop_node.predicted()
    stream = loop_node.client(base_url=url).chat.completions.create(
        model=loop_node.model, messages=loop_node.messages("disconnect-first"),
        max_tokens=MAX_TOKENS, stream=True)
    chunks = _read_until(stream, lambda cs: sum(bool(_reasoning(c)) for c in cs) >= 20)
    busy = loop_node.processing()
    closed = time.monotonic()
    stream.close()
    waited = loop_node.wait_idle(timeout=FREED_WITHIN)
    generated = loop_node.predicted() - before
    e2e_report("llamacpp_disconnect_first_attempt", chunks=len(chunks),
               idle_after_seconds=round(time.monotonic() - closed, 3), generated=generated)
    assert busy == 1, "the request was still generating when the client left"
    assert waited <= FREED_WITHIN
    assert not any(_content(c) for c in chunks)
    assert generated < MAX_TOKENS


def test_disconnect_during_reissue_frees_the_slot(leaky_node, spawn_sidecar,
                                                  e2e_report) -> None:
    """Closing the client stream while the thinking-off reissue loops in content frees
    the slot: the sidecar's second upstream request is cancelled too."""
    url = spawn_sidecar(leaky_node, NO_LOOP_DETECTORS)
    leaky_node.wait_idle()
    before = leaky_node.predicted()
    client = leaky_node.client(base_url=url)
    with client.chat.completions.with_streaming_response.create(
        model=leaky_node.model, messages=leaky_node.messages("disconnect-reissue"),
        max_tokens=MAX_TOKENS, stream=True, extra_headers={"X-Thinking-Budget": "30"},
    ) as resp:
        lines = resp.iter_lines()
        comments: list[str] = []
        content_chunks = 0
        for line in lines:
            if line.startswith(":"):
                comments.append(line)
            elif line.startswith("data: {") and '"content":"' in line and comments:
                content_chunks += 1
                if content_chunks >= 30:  # well into the reissue's content loop
                    break
        busy = leaky_node.processing()
        closed = time.monotonic()
    waited = leaky_node.wait_idle(timeout=FREED_WITHIN)
    generated = leaky_node.predicted() - before
    e2e_report("llamacpp_disconnect_reissue", comments=comments, content_chunks=content_chunks,
               idle_after_seconds=round(time.monotonic() - closed, 3), generated=generated)
    assert any("action=reissue:no-think" in c for c in comments), comments
    assert content_chunks >= 30
    assert busy == 1, "the reissue was still generating when the client left"
    assert waited <= FREED_WITHIN
    # The first attempt stopped at the budget (about 30 tokens) and the reissue early.
    assert generated < MAX_TOKENS
