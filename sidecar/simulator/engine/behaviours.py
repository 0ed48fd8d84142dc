"""Behaviour scripts of the simulated models: which tokens each model name produces.

Pure: the scripts are generators over fixed texts. Healthy reasoning is real (CC0 traces
from ``cpldcpu/MisguidedAttention``, shipped in ``data/healthy_traces.jsonl`` with their
source and license fields), so detectors see genuine non-repetitive thinking.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sidecar.simulator.engine.generation import Script
from sidecar.simulator.engine.tokenizer import THINK_CLOSE, THINK_OPEN, tokenize

# fmt: off
# The exact 22-token loop of the tiny Qwen model in the vLLM 0.32 captures.
LOOP_TOKENS: tuple[str, ...] = (
    " Hmm", ",", " maybe", " my", " earlier", " reasoning", " about", " this", " bug",
    " was", " wrong", " so", " I", " should", " re", "-", "check", " every", " step",
    " again", " carefully", ".",
)
# Its thinking-off answer, as captured.
FIX_ANSWER: tuple[str, ...] = (
    " Fix", ":", " guard", " empty", " lists", " before", " indexing", "!",
)
# fmt: on
# Written for the simulator (no Korean trace exists in the shared set): "Wait, I have to
# check this calculation again. Let's go over, one by one from the start, whether the
# assumption made earlier is right."
KOREAN_LOOP = (
    " 잠깐, 이 계산을 다시 확인해야겠다. 앞에서 세운 가정이 맞는지 처음부터 하나씩 따져 보자."
)
KOREAN_ANSWER = " 답: 목록이 비어 있는지 먼저 확인하면 됩니다."
SHORT_ANSWER = " The short answer: the total is 12 items."
STALL_AFTER_TOKENS = 24

# One idea per slot, several wordings each: the loop says the same thing every cycle in
# different words, and the count it "finds" drifts.
_PARAPHRASES: tuple[tuple[str, ...], ...] = (
    (
        " Wait, maybe I got the count wrong.",
        " Hold on, perhaps my count was off.",
        " Hmm, it is possible that I miscounted.",
        " Actually, I might have counted incorrectly here.",
        " But what if my tally was mistaken?",
    ),
    (
        " Let me recount the items from the start: that gives {n}.",
        " Going back over everything again, the total comes to {n}.",
        " Starting over from the first box, I now get {n}.",
        " Counting once more from the top, there are {n} of them.",
        " If I tally each group again, the sum is {n}.",
    ),
    (
        " That does not match what I found before.",
        " Yet this disagrees with the earlier result.",
        " However, the previous total was different.",
        " This conflicts with my last answer, though.",
        " So the two numbers are not the same.",
    ),
    (
        " I should verify each step again.",
        " Every step needs to be checked once more.",
        " So I need to go through the whole process again.",
        " Therefore, let me re-examine all of the steps.",
        " I will redo the reasoning carefully.",
    ),
)

BASE_MODELS: tuple[str, ...] = (
    "sim-healthy",
    "sim-loop",
    "sim-paraphrase-loop",
    "sim-long-thinking",
    "sim-cjk-loop",
    "sim-leaky",
    "sim-stall",
    "sim-replay",
)


@dataclass(frozen=True, slots=True)
class Trace:
    """A recorded stream split the way the qwen3 parser splits it."""

    trace_id: str
    reasoning: str | None  # None: the trace has no think block
    content: str
    closed: bool  # the think block ended with </think>
    answer: str | None = None  # the reply with thinking off, if the record gives one


def split_trace(trace_id: str, text: str) -> Trace:
    """Split raw text on ``<think>``/``</think>`` into reasoning and content."""
    if THINK_OPEN in text:
        inner = text.split(THINK_OPEN, 1)[1]
        if THINK_CLOSE in inner:
            reasoning, content = inner.split(THINK_CLOSE, 1)
            return Trace(trace_id, reasoning, content, closed=True)
        return Trace(trace_id, inner, "", closed=False)
    if THINK_CLOSE in text:  # the template pre-filled <think>
        reasoning, content = text.split(THINK_CLOSE, 1)
        return Trace(trace_id, reasoning, content, closed=True)
    return Trace(trace_id, None, text, closed=True)


def load_traces(lines: Sequence[str]) -> list[Trace]:
    """Parse JSONL trace records (``text`` required; ``id`` or ``source`` names them; an
    optional ``answer`` is the reply with thinking off, else the content's first sentence)."""
    traces: list[Trace] = []
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise TypeError("every trace record needs a string 'text'")
        trace_id = str(record.get("id", record.get("source", len(traces))))
        trace = split_trace(trace_id, record["text"])
        if isinstance(record.get("answer"), str):
            trace = dataclasses.replace(trace, answer=record["answer"])
        traces.append(trace)
    return traces


def healthy_traces() -> list[Trace]:
    """The packaged healthy traces ``sim-healthy`` and ``sim-long-thinking`` stream."""
    data = resources.files("sidecar.simulator").joinpath("data/healthy_traces.jsonl")
    return load_traces(data.read_text(encoding="utf-8").splitlines())


def first_sentence(text: str, limit: int = 240) -> str:
    """The first sentence of an answer, as a short thinking-off reply."""
    flat = " ".join(text.split())
    for end in (". ", ".\n", "! ", "? "):
        cut = flat.find(end)
        if 0 < cut < limit:
            return " " + flat[: cut + 1]
    return " " + flat[:limit].rstrip() if flat else SHORT_ANSWER


def _tokens(text: str) -> Iterator[str]:
    return iter(tokenize(text))


def _forever(tokens: Sequence[str]) -> Iterator[str]:
    return itertools.cycle(tokens)


def _paraphrase_loop(rng: random.Random) -> Iterator[str]:
    count = 12
    previous: tuple[int, ...] = ()
    while True:
        pick = tuple(rng.randrange(len(slot)) for slot in _PARAPHRASES)
        if pick == previous:  # never say a cycle with exactly the same words twice in a row
            pick = (pick[0] + 1) % len(_PARAPHRASES[0]), *pick[1:]
        previous = pick
        count += rng.choice((1, 2, 3, -1))
        for slot, choice in zip(_PARAPHRASES, pick, strict=True):
            yield from tokenize(slot[choice].format(n=count))


def _chain(traces: Sequence[Trace], start: int) -> Iterator[str]:
    """Reasoning of every trace in turn, starting at ``start``, never ending."""
    order = [traces[(start + k) % len(traces)] for k in range(len(traces))]
    for trace in itertools.cycle(order):
        yield from tokenize(trace.reasoning or "")


class Behaviours:
    """The registry of simulated models for one node (explicit; nothing is discovered)."""

    def __init__(
        self,
        *,
        seed: int,
        served_model_name: str | None,
        replay_file: Path | None,
        served_model_behaviour: str = "sim-loop",
    ) -> None:
        self._seed = seed
        self._served = served_model_name
        self._served_behaviour = served_model_behaviour
        self._healthy = healthy_traces()
        self._replay: list[Trace] = []
        if replay_file is not None:
            self._replay = load_traces(replay_file.read_text(encoding="utf-8").splitlines())
        names = [m for m in BASE_MODELS if m != "sim-replay" or self._replay]
        if served_model_behaviour not in names:
            raise ValueError(f"served_model_behaviour {served_model_behaviour!r} is not a "
                             f"model of this node ({', '.join(names)})")
        if served_model_name and served_model_name not in names:
            names.append(served_model_name)
        self.names: tuple[str, ...] = tuple(names)

    def resolve(self, model: str) -> str:
        """The ``sim-*`` model whose script ``model`` runs (the served name's behaviour)."""
        if model == self._served and model not in BASE_MODELS:
            return self._served_behaviour
        return model

    def knows(self, model: str) -> bool:
        """Whether ``model`` names a simulated model of this node."""
        return model in self.names

    def _healthy_index(self, key: str) -> int:
        return zlib.crc32(f"{self._seed}:{key}".encode()) % len(self._healthy)

    def replay_trace(self, selector: str | None) -> Trace:
        """The replay trace chosen by ``X-Sim-Trace`` (index or id); the first by default."""
        if not self._replay:
            raise LookupError("no replay file is configured")
        if selector is None or selector == "":
            return self._replay[0]
        if selector.isdigit() and int(selector) < len(self._replay):
            return self._replay[int(selector)]
        for trace in self._replay:
            if trace.trace_id == selector:
                return trace
        raise LookupError(f"no replay trace {selector!r}")

    def script(self, model: str, *, key: str, choice: int, trace: Trace | None = None) -> Script:
        """The script of ``model``; ``key`` (the prompt) picks which healthy trace is used,
        ``choice`` seeds per-choice variation, ``trace`` is the replay trace."""
        model = self.resolve(model)
        healthy = self._healthy[self._healthy_index(key)]
        short = first_sentence(healthy.content)
        if model == "sim-healthy":
            return Script(
                reasoning=lambda: _tokens(healthy.reasoning or ""),
                after_thinking=lambda: _tokens(healthy.content),
                direct=lambda: _tokens(short),
            )
        if model in ("sim-loop", "sim-leaky"):
            leaky = model == "sim-leaky"
            return Script(
                reasoning=lambda: _forever(LOOP_TOKENS),
                after_thinking=lambda: _forever(LOOP_TOKENS),
                direct=(
                    (lambda: itertools.chain(FIX_ANSWER, _forever(LOOP_TOKENS)))
                    if leaky
                    else (lambda: iter(FIX_ANSWER))
                ),
            )
        if model == "sim-paraphrase-loop":
            rng_seed = f"{self._seed}:{choice}:paraphrase"
            return Script(
                reasoning=lambda: _paraphrase_loop(random.Random(rng_seed)),  # noqa: S311
                after_thinking=lambda: _paraphrase_loop(
                    random.Random(rng_seed + ":content")  # noqa: S311
                ),
                direct=lambda: _tokens(SHORT_ANSWER),
            )
        if model == "sim-long-thinking":
            start = self._healthy_index(key)
            return Script(
                reasoning=lambda: _chain(self._healthy, start),
                after_thinking=lambda: _tokens(healthy.content),
                direct=lambda: _tokens(short),
            )
        if model == "sim-cjk-loop":
            korean = tokenize(KOREAN_LOOP)
            return Script(
                reasoning=lambda: _forever(korean),
                after_thinking=lambda: _forever(korean),
                direct=lambda: _tokens(KOREAN_ANSWER),
            )
        if model == "sim-stall":
            return Script(
                reasoning=lambda: _tokens(healthy.reasoning or ""),
                after_thinking=lambda: _tokens(healthy.content),
                direct=lambda: _tokens(short),
                stall_after=STALL_AFTER_TOKENS,
            )
        if model == "sim-replay":
            replay = trace if trace is not None else self.replay_trace(None)
            answer = replay.content if replay.content.strip() else SHORT_ANSWER
            direct = replay.answer if replay.answer is not None else first_sentence(answer)
            if replay.reasoning is None:
                return Script(
                    reasoning=lambda: iter(()),
                    after_thinking=lambda: _tokens(answer),
                    direct=lambda: _tokens(answer),
                )
            reasoning_text = replay.reasoning
            return Script(
                reasoning=lambda: _tokens(reasoning_text),
                after_thinking=lambda: _tokens(replay.content),
                direct=lambda: _tokens(direct),
                reasoning_closes=replay.closed,
            )
        raise LookupError(f"unknown model {model!r}")
