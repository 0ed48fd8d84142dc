"""Trace records and the hourly sample (pure): the record's fields, and a reservoir that
keeps each capture of an hour with the same chance."""

from __future__ import annotations

import random
from collections import Counter

import orjson

from detectors import Evidence, Verdict
from sidecar.traces.record import MAX_MODELS, OTHER_MODEL, Capture, Reservoir, kind_of, prompt_of


def capture(i: int = 0, model: str | None = "m", verdict: Verdict | None = None) -> Capture:
    return Capture(kind=kind_of(verdict), request_id=f"r{i}", attempt=1, step="salvage",
                   model=model, mode="enforce", wall=1_700_000_000.0, reasoning="abc def",
                   truncated=True, thinking_ended=False, thinking_tokens=3, verdict=verdict)


def test_a_record_has_the_traces_fields_and_the_verdict() -> None:
    """The record reads like a shared trace (``text`` with the think tag, ``source``,
    ``model``, ``label``...) and carries the verdict with its offset in ``text``; a
    verdict on the answer, which is not recorded, has no offset."""
    v = Verdict("periodic", "thinking", "why", Evidence("def", 3, 9), 40, 5)
    r = capture(verdict=v).record()
    assert r["text"] == "<think>abc def"
    assert r["source"] == "runaway-sidecar:r0#1"
    assert (r["label"], r["kind"], r["mode"], r["step"]) == (None, "detection", "enforce",
                                                            "salvage")
    assert (r["thinking_chars"], r["thinking_tokens"], r["truncated"]) == (7, 3, True)
    assert r["recorded_at"] == "2023-11-14T22:13:20+00:00"
    assert r["verdict"] == {"detector": "periodic", "channel": "thinking", "reason": "why",
                            "excerpt": "def", "period": 3, "count": 9, "at_token": 40,
                            "at_char": 12}
    assert r["text"][: r["verdict"]["at_char"]].endswith("abc d")
    assert len(r["id"]) == 32
    assert "prompt" not in r
    on_answer = Verdict("recurrence", "content", "why", Evidence("x", 0, 1), 90, 300)
    assert capture(verdict=on_answer).record()["verdict"]["at_char"] is None
    assert orjson.loads(capture().line()) | {"id": ""} == capture().record() | {"id": ""}


def test_kinds() -> None:
    """Budgets and the stall timer are sampled like healthy attempts; other verdicts are
    detections."""
    def v(name: str) -> Verdict:
        return Verdict(name, "thinking", "", Evidence("", 0, 0), 1, 1)
    assert kind_of(None) == "healthy"
    assert {kind_of(v(n)) for n in ("thinking_token_budget", "thinking_seconds_budget",
                                    "stall")} == {"budget"}
    assert {kind_of(v(n)) for n in ("recurrence", "sentences", "degeneration")} == {
        "detection"}


def test_prompt_fields() -> None:
    """Only the prompt fields of the body are kept; a body that is not a JSON object
    gives an empty prompt."""
    raw = orjson.dumps({"model": "m", "messages": [1], "system": "s", "temperature": 1})
    assert prompt_of(raw) == {"system": "s", "messages": [1]}
    assert prompt_of(b"not json") == {}
    assert prompt_of(b"[1, 2]") == {}


def test_the_reservoir_keeps_every_capture_with_the_same_chance() -> None:
    """Offered 10 captures in an hour, a reservoir of 3 keeps each one in about 3 of 10
    hours (2,000 hours, seeded)."""
    rng = random.Random(1)
    kept: Counter[str] = Counter()
    reservoir = Reservoir(3, rng)
    for hour in range(2000):
        for i in range(10):
            reservoir.offer(capture(i), hour)
        kept.update(c.request_id for c in reservoir.over(hour + 1))
    assert sum(kept.values()) == 3 * 2000
    assert all(0.27 < kept[f"r{i}"] / 2000 < 0.33 for i in range(10)), kept


def test_the_reservoir_hands_back_past_hours_only() -> None:
    """A pool stays until its hour is over; ``drain`` empties them all; size 0 keeps
    nothing."""
    reservoir = Reservoir(2, random.Random(0))
    reservoir.offer(capture(1), 10)
    reservoir.offer(capture(2, model="n"), 11)
    assert reservoir.over(11) == [capture(1)]
    assert reservoir.over(11) == []
    assert reservoir.held == 1
    assert reservoir.drain() == [capture(2, model="n")]
    nothing = Reservoir(0)
    nothing.offer(capture(), 1)
    assert nothing.held == 0


def test_models_past_the_cap_share_one_pool() -> None:
    """Past ``MAX_MODELS`` distinct models in an hour, the others are sampled together."""
    reservoir = Reservoir(1, random.Random(0))
    for i in range(MAX_MODELS + 10):
        reservoir.offer(capture(i, model=f"model-{i}"), 5)
    out = reservoir.over(6)
    models = {c.model for c in out}
    assert len(out) == MAX_MODELS + 1
    assert {f"model-{i}" for i in range(MAX_MODELS - 1)} <= models
    reservoir.offer(capture(0, model=None), 6)
    assert [c.model for c in reservoir.drain()] == [None]
    assert OTHER_MODEL == "other"
