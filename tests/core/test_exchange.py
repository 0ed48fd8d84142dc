"""The exchange's books and what can be watched at all (pure)."""

from __future__ import annotations

import orjson

from sidecar.apis.openai.api import CHAT
from sidecar.config import Config
from sidecar.core.exchange import MAX_WATCHED_CHOICES, Exchange, watchable


def test_an_exchange_starts_clean() -> None:
    """A new exchange has no verdict, no attempt and outcome ok; it reads its client's
    streaming from the request's facts."""
    cfg = Config()
    ex = Exchange(api=CHAT, config=cfg, model="m", mode="enforce", request_id="r",
                  started=1.0, facts=CHAT.facts({"stream": True}))
    assert (ex.outcome, ex.attempts, ex.verdicts, ex.thinking_tokens) == ("ok", 0, [], 0)
    assert ex.client_stream
    assert ex.config is cfg
    assert not Exchange(api=CHAT, config=cfg, model=None, mode="cut", request_id="r",
                        started=1.0, facts=CHAT.facts({})).client_stream


def test_what_can_be_watched() -> None:
    """A huge ``n`` or a body nested deeper than orjson serializes is passed through; an
    ordinary one, and one with many brackets that nest shallowly, are watched."""
    ok = {"model": "m", "messages": [{"role": "user", "content": "x"}] * 300}
    assert watchable(orjson.dumps(ok), ok)
    huge = {"n": MAX_WATCHED_CHOICES + 1}
    assert not watchable(orjson.dumps(huge), huge)
    deep: dict[str, object] = {}
    node = deep
    for _ in range(300):
        node["x"] = {}
        node = node["x"]  # type: ignore[assignment]
    raw = b'{"x":' * 300 + b"{}" + b"}" * 300
    assert not watchable(raw, deep)
