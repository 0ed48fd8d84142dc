"""The behaviour scripts and the traces behind them, without a server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from sidecar.simulator.engine.behaviours import (
    Behaviours,
    load_traces,
    split_trace,
)


def test_split_trace_variants() -> None:
    """Traces split into reasoning and content on the think tags, however they appear."""
    assert split_trace("a", "<think>r</think>c").reasoning == "r"
    assert split_trace("a", "r</think>c").content == "c"
    assert split_trace("a", "only content").reasoning is None
    assert not split_trace("a", "<think>never closed").closed
    with pytest.raises(TypeError):
        load_traces(['{"no_text": 1}'])


def test_long_thinking_chains_different_traces() -> None:
    """sim-long-thinking moves on to another real trace instead of looping one."""
    behaviours = Behaviours(seed=0, served_model_name=None, replay_file=None)
    script = behaviours.script("sim-long-thinking", key="k", choice=0)
    text = "".join(itertools.islice(script.reasoning(), 20_000))
    assert text.count("Okay") >= 3
    assert len(text) > 30_000


def test_long_thinking_has_no_exact_repeat_within_default_context() -> None:
    """Within the default 8192-token context no 30-token run of the chain comes back."""
    behaviours = Behaviours(seed=0, served_model_name=None, replay_file=None)
    for key in ("a", "b", "c"):
        tokens = list(
            itertools.islice(
                behaviours.script("sim-long-thinking", key=key, choice=0).reasoning(), 8192
            )
        )
        grams = {tuple(tokens[i : i + 30]) for i in range(len(tokens) - 29)}
        assert len(grams) == len(tokens) - 29


def test_replay_answer_and_served_behaviour(tmp_path: Path) -> None:
    """A replay record's answer is the thinking-off reply; the served name can run
    sim-replay; an unknown behaviour is refused."""
    traces = load_traces(['{"text": "<think> a b", "answer": "Fix!"}', '{"text": "x"}'])
    assert traces[0].answer == "Fix!"
    assert traces[1].answer is None
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "<think> a b", "answer": "Fix!"}\n', encoding="utf-8")
    behaviours = Behaviours(seed=0, served_model_name="tiny", replay_file=path,
                            served_model_behaviour="sim-replay")
    assert behaviours.resolve("tiny") == "sim-replay"
    assert behaviours.resolve("sim-loop") == "sim-loop"
    assert list(behaviours.script("tiny", key="k", choice=0).direct()) == ["Fix", "!"]
    with pytest.raises(ValueError, match="sim-replay"):
        Behaviours(seed=0, served_model_name="tiny", replay_file=None,
                   served_model_behaviour="sim-replay")


async def test_healthy_traces_carry_source_and_license() -> None:
    """The shipped healthy traces keep their CC0 source and license fields."""
    path = Path(__file__).parents[3] / "sidecar" / "simulator" / "data" / "healthy_traces.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 5
    for row in rows:
        assert row["source"].startswith("cpldcpu/MisguidedAttention:")
        assert row["license"] == "CC0-1.0"
        assert row["label"] == "healthy"
