"""The simulated engine: turns a behaviour script into the tokens vLLM would stream.

Pure and synchronous (no I/O, no clock). A :class:`Script` says which tokens a model
wants to produce; :func:`generate` applies what the engine and the qwen3 reasoning parser
of vLLM 0.32 do on top of it: the ``<think>`` / ``</think>`` special tokens (counted as
completion tokens but never visible), the parser state that routes text to ``reasoning``
or ``content``, ``thinking_token_budget`` (forces ``</think>``), ``repetition_detection``,
``max_tokens`` and the end-of-sequence token.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sidecar.simulator.engine.tokenizer import EOS, THINK_CLOSE, THINK_OPEN

TokenSource = Callable[[], Iterator[str]]


class Channel(enum.Enum):
    """Where the reasoning parser routes a token's text."""

    REASONING = "reasoning"
    CONTENT = "content"
    SPECIAL = "special"  # <think>, </think>, end-of-sequence: counted, never shown


class Mode(enum.Enum):
    """How the prompt leaves the model when generation starts."""

    THINK = "think"  # thinking on: the model opens <think> itself
    THINK_PREFILLED = "think-prefilled"  # the prompt already ends inside an open <think>
    NO_THINK = "no-think"  # thinking off: empty think block in the prompt, parser in content
    CONTINUE = "continue"  # continue_final_message after a closed think, thinking on


@dataclass(frozen=True, slots=True)
class Script:
    """What a simulated model says. Each source is called afresh per choice.

    - ``reasoning``: tokens inside the think block (may be infinite).
    - ``after_thinking``: the content once thinking ends, naturally or by a budget.
    - ``direct``: the answer when thinking is off or a final message is continued.
    - ``reasoning_closes``: whether the model closes ``</think>`` when ``reasoning`` runs out;
      if not, the stream ends there with ``length`` (a trace cut by its generation cap).
    - ``stall_after``: the node stops sending after this many tokens (``sim-stall``).
    """

    reasoning: TokenSource
    after_thinking: TokenSource
    direct: TokenSource
    reasoning_closes: bool = True
    stall_after: int | None = None


@dataclass(frozen=True, slots=True)
class RepetitionParams:
    """vLLM's ``repetition_detection``: stop when the newest ``min_count`` runs of one
    pattern of ``min_pattern_size``..``max_pattern_size`` tokens repeat back to back."""

    max_pattern_size: int
    min_pattern_size: int
    min_count: int


@dataclass(frozen=True, slots=True)
class GenSpec:
    """Per-choice generation limits, resolved from the request."""

    max_tokens: int
    mode: Mode
    thinking_budget: int | None = None
    repetition: RepetitionParams | None = None
    #: vLLM 0.32 labels a continued final message as ``content`` when streaming and as
    #: ``reasoning`` when not (tests/data/captures/e2e/chat_salvage_continue_final*),
    #: and counts it as reasoning tokens either way.
    stream: bool = False


@dataclass(frozen=True, slots=True)
class Token:
    """One generated token, produced once per engine step of a choice.

    ``completion_tokens`` and ``reasoning_tokens`` are the running totals after it;
    ``finish_reason`` is set on the last token of the choice.
    """

    text: str
    channel: Channel
    completion_tokens: int
    reasoning_tokens: int
    finish_reason: str | None = None
    stop_reason: str | None = None


@dataclass(frozen=True, slots=True)
class _Raw:
    text: str
    channel: Channel
    eos: bool = False


def _raw_tokens(script: Script, spec: GenSpec) -> Iterator[_Raw]:
    if spec.mode in (Mode.NO_THINK, Mode.CONTINUE):
        as_content = spec.mode is Mode.NO_THINK or spec.stream
        channel = Channel.CONTENT if as_content else Channel.REASONING
        for text in script.direct():
            yield _Raw(text, channel)
        yield _Raw(EOS, Channel.SPECIAL, eos=True)
        return
    if spec.mode is Mode.THINK:
        yield _Raw(THINK_OPEN, Channel.SPECIAL)
    budget = spec.thinking_budget
    exhausted = True
    for spent, text in enumerate(script.reasoning()):
        if budget is not None and spent >= budget:
            exhausted = False
            break
        yield _Raw(text, Channel.REASONING)
    if exhausted and not script.reasoning_closes:
        return  # the trace ended inside its think block
    yield _Raw(THINK_CLOSE, Channel.SPECIAL)  # natural, or forced by the budget
    for text in script.after_thinking():
        yield _Raw(text, Channel.CONTENT)
    yield _Raw(EOS, Channel.SPECIAL, eos=True)


def _repeats(history: list[str], params: RepetitionParams) -> bool:
    count = params.min_count
    for size in range(max(1, params.min_pattern_size), params.max_pattern_size + 1):
        span = size * count
        if span > len(history):
            break
        tail = history[-span:]
        pattern = tail[-size:]
        if all(tail[k * size : (k + 1) * size] == pattern for k in range(count - 1)):
            return True
    return False


def generate(script: Script, spec: GenSpec) -> Iterator[Token]:
    """Yield the tokens of one choice until it finishes (``stop``, ``length`` or
    ``repetition``). A script that never ends is cut by ``spec.max_tokens``."""
    if spec.max_tokens <= 0:
        return
    raw = _raw_tokens(script, spec)
    current = next(raw, None)
    completion = reasoning = 0
    history: list[str] = []
    rep = spec.repetition
    while current is not None:
        following = next(raw, None)  # one token of look-ahead: a trace may just end
        completion += 1
        if current.channel is Channel.REASONING or (
                spec.mode is Mode.CONTINUE and current.channel is Channel.CONTENT):
            reasoning += 1
        finish: str | None = None
        stop: str | None = None
        if rep is not None:
            history.append(current.text)
        if current.eos:
            finish = "stop"
        elif rep is not None and _repeats(history, rep):
            finish, stop = "repetition", "repetition_detected"
        elif completion >= spec.max_tokens or following is None:
            finish = "length"
        text = "" if current.channel is Channel.SPECIAL else current.text
        yield Token(text, current.channel, completion, reasoning, finish, stop)
        if finish is not None:
            return
        current = following


def interleave(choices: list[Iterator[Token]]) -> Iterator[list[tuple[int, Token]]]:
    """Run ``n`` choices as engine steps: yield, per step, the ``(index, token)`` pairs
    produced in that step, lowest index first.

    Choice ``j`` is scheduled ``j`` steps after choice 0 (one prefill per step), which
    reproduces the interleaving of the captured ``n=2`` stream: 0, 0, 1, 0, 1, …, 1.
    """
    active = dict(enumerate(choices))
    step = 0
    while active:
        produced: list[tuple[int, Token]] = []
        for index in sorted(active):
            if index > step:
                continue
            token = next(active[index], None)
            if token is None:
                del active[index]
                continue
            produced.append((index, token))
            if token.finish_reason is not None:
                del active[index]
        step += 1
        if produced or active:
            yield produced
