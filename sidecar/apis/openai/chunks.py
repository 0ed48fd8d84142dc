"""The OpenAI chunk decoder: the chunks of a chat-completions or completions stream in,
format-neutral events (``sidecar.core.events``) out.

Pure and incremental. ``StreamModel.feed(data)`` takes the ``data`` payload of one SSE
event (bytes), parses it once with orjson and returns the events it carries, per choice
index (``n>1`` is tracked per choice):

- ``TextDelta`` with ``channel="thinking"`` for ``delta.reasoning``,
  ``delta.reasoning_content`` or text between inline ``<think>``/``</think>`` tags in
  ``delta.content`` (chat) or ``text`` (completions); tags may be split across chunks,
  and a lone ``</think>`` (templates that pre-fill ``<think>``) switches to content;
- ``TextDelta`` with ``channel="content"`` for the answer;
- ``ToolCallDelta``, ``Finish``, ``Usage``, ``StreamError`` and ``Done``.

Token counts come from cumulative ``usage`` on every chunk when the server sends it
(``continuous_usage_stats``); otherwise each chunk that carries text counts as one token,
which is what vLLM sends with the default ``stream_interval`` of 1.

Most chunks of a stream differ only in a few characters of text. With ``templates=True``
the model learns such a chunk's bytes around its text, proves them by parsing a variant,
and then parses only the text string of a payload with the same bytes around it (see
``StreamModel``). The events are the same either way; only the parse is cheaper.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from detectors.base import CONTENT, THINKING, Channel
from sidecar.apis.templates import (
    PLAIN_FIRST,
    json_string,
    shared_matcher,
    shared_part,
    string_end,
)
from sidecar.core.events import (
    DONE,
    Finish,
    MalformedChunk,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkTagSplitter,
    ToolCallDelta,
    Usage,
)

ChunkKind = Literal["chat", "completions"]
"""Which of the two OpenAI chunk-streaming APIs a stream belongs to (named as their
routes): text in ``delta.content`` and reasoning in ``delta.reasoning`` or
``delta.reasoning_content`` (``chat``), or in ``text`` (``completions``)."""


class _Choice:
    __slots__ = ("saw_reasoning", "splitter")

    def __init__(self, in_think: bool) -> None:
        self.splitter = ThinkTagSplitter(in_think=in_think)
        self.saw_reasoning = False


#: Text keys a template can stand for, and the channel each one feeds directly (None:
#: content, which goes through the choice's ``<think>`` tag splitter).
_TEMPLATE_KEYS: dict[str, Channel | None] = {
    "reasoning": THINKING, "reasoning_content": THINKING, "content": None, "text": None}
_MAX_TEMPLATES = 4  # one per (choice, key) in use: n=2 streams switch between four
_MAX_FRUITLESS = 4  # templates dropped without a single hit before learning stops
#: Largest fixed part (the payload less its text) kept as a template. A template lives as
#: long as its stream, so a chunk whose fixed part is bigger than any chunk vLLM sends
#: (a large field this model does not read) is parsed in full instead of held.
_MAX_TEMPLATE_BYTES = 1024


class Template:
    """The bytes around the one text value of a chunk shape that repeats.

    Learned from a chunk parsed in full, and proven there: the chunk with its text value
    replaced parses to the same object with only that value changed. So a payload that is
    ``prefix`` + one JSON string + ``suffix`` is that chunk with another text, and only
    the string needs parsing. ``event_prefix`` and ``event_suffix`` are the same bytes as
    a whole SSE event holds them (``data: `` before, the blank line after): a test of an
    event against them needs no offsets (a method call with offsets costs several times
    the bare test in the compiled build). The suffixes are shared between streams
    (``shared_part``); the prefixes, which hold the stream's id, are not. ``index`` is the
    chunk's choice; ``channel`` the channel its text feeds (``THINKING`` for a reasoning
    field), or None for content and completion text, which go through the choice's
    ``<think>`` tag splitter."""

    __slots__ = ("after", "channel", "event_prefix", "event_suffix", "hits", "index",
                 "prefix", "rest", "start", "suffix")

    def __init__(self, prefix: bytes, suffix: bytes, index: int, channel: Channel | None) -> None:
        self.prefix = prefix
        self.suffix = shared_part(suffix)
        self.event_prefix = b"data: " + prefix
        self.event_suffix = shared_part(suffix + b"\n\n")
        #: The rest of an event after ``event_prefix``, from its text's opening quote,
        #: when the text holds no escape (``shared_matcher``).
        self.rest = shared_matcher(b'"' + self.event_suffix, quote=True)
        self.start = len(prefix)  # where the text's JSON string begins
        self.after = len(suffix)  # bytes after it
        self.index = index
        self.channel = channel
        self.hits = 0


class StreamModel:
    """Turns the data payloads of one upstream stream into ``StreamEvent``s.

    ``chunk`` holds the last parsed JSON object (or None for ``[DONE]``), so callers
    that need more of it (ids, aggregation) do not parse again. A caller done with it
    sets it to None, so a stream waiting for its next bytes does not keep it.

    With ``templates=True`` the model learns the shape of the chunks that carry one
    choice's text and nothing else (most of a stream: the same id, model and fields, a
    different few characters), and for a payload of a learned shape parses only its text
    string. The events are the same as from a full parse; ``chunk`` is then not updated
    (it keeps the last chunk parsed in full), so only callers that forward the upstream
    bytes as they are, without reading ``chunk``, should ask for it.
    """

    __slots__ = ("_choices", "_dropped_hits", "_fruitless", "_head", "_in_think",
                 "_last_completion", "_plain", "_templates", "_usage_seen", "chunk", "kind")

    def __init__(self, kind: ChunkKind, *, starts_in_thinking: bool = False,
                 templates: bool = False, plain_first: bool = PLAIN_FIRST) -> None:
        """``plain_first``: ``match_event`` tries a template's regular expression first
        (``sidecar.apis.templates.PLAIN_FIRST``; both ways read the same)."""
        self._plain = plain_first
        self.kind = kind
        self.chunk: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}
        self._in_think = starts_in_thinking
        self._usage_seen = False
        self._last_completion = 0
        self._templates: list[Template] = []
        # ``_templates[0]`` (the last learned, which nearly every chunk has), or None:
        # tried without the list, one object less to fetch from memory per chunk.
        self._head: Template | None = None
        # Templates dropped without a hit; learning stops at _MAX_FRUITLESS (None: off).
        self._fruitless: int | None = 0 if templates else None
        self._dropped_hits = 0

    @property
    def templated(self) -> int:
        """How many payloads were read through a learned template (not parsed in full)."""
        return self._dropped_hits + sum(t.hits for t in self._templates)

    @property
    def learning(self) -> bool:
        """Whether chunks parsed in full may still become templates (``templates=True``,
        and fewer than four templates were dropped without ever being used)."""
        return self._fruitless is not None and self._fruitless < _MAX_FRUITLESS

    def feed(self, data: bytes) -> list[StreamEvent]:
        """Parse one event payload. Raises ``MalformedChunk`` for anything that is not
        ``[DONE]`` or a JSON object with the fields of a chunk."""
        if data == b"[DONE]":
            self.chunk = None
            return [DONE]
        if self._templates:
            hit = self.match(data)
            if hit is not None:
                return self.fill(*hit)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedChunk(f"invalid JSON in stream: {exc}") from None
        if not isinstance(obj, dict):
            raise MalformedChunk("stream chunk is not a JSON object")
        self.chunk = obj
        err = obj.get("error")
        if err is not None:
            return [_error_event(err)]
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise MalformedChunk("stream chunk has no choices list")
        events: list[StreamEvent] = []
        usage = obj.get("usage")
        tokens = -1 if usage is None else self._tokens_from_usage(usage, bool(choices), events)
        for choice in choices:
            if not isinstance(choice, dict):
                raise MalformedChunk("choice is not an object")
            left = self._choice(choice, 1 if tokens < 0 else tokens, events)
            if tokens >= 0:
                tokens = left
        if usage is None and len(choices) == 1 and self.learning:
            self._learn(data, obj, choices[0])
        return events

    def inline_open(self, index: int) -> bool:
        """Whether choice ``index`` is inside an inline ``<think>`` that was not closed."""
        state = self._choices.get(index)
        return state is not None and not state.saw_reasoning and state.splitter.in_think

    def flush(self) -> list[StreamEvent]:
        """End of stream: emit text held back by tag splitters."""
        events: list[StreamEvent] = []
        for index, state in self._choices.items():
            for channel, text in state.splitter.flush():
                events.append(TextDelta(index, channel, text, 0))
        return events

    def match(self, data: bytes) -> tuple[Template, str] | None:
        """The learned template that the payload ``data`` fits, and the payload's text; or
        None (no template fits, or its text's place does not hold one JSON string), when
        only ``feed`` can read it. ``fill`` of the two gives the payload's events, the
        ones ``feed`` would return, and ``feed`` itself goes this way first."""
        return self._fit(data, 0, len(data))

    def match_event(self, raw: bytes) -> tuple[Template, str] | None:
        """``match`` of a whole SSE event: ``raw`` must be ``data: `` + payload +
        ``\\n\\n`` where ``match(payload)`` hits, or the answer is None. A hit is then
        exactly one event with one ``data:`` line: a template holds no line break
        (``_learn`` takes no payload with one) and the JSON string between its bytes no
        raw CR or LF (``orjson`` rejects them). The caller knows that ``raw`` starts an
        event (``SSEDecoder.idle``); the payload is not copied out before the test."""
        template = self._head
        if template is None:
            return None
        # Nearly every event: the head's shape and a text without an escape, read by one
        # regular expression (a fraction of the steps of the general path, in the pure
        # build).
        prefix = template.event_prefix
        if self._plain and raw.startswith(prefix):
            found = template.rest(raw, len(prefix))
            if found is not None:
                try:
                    text = found[1].decode()
                except UnicodeDecodeError:
                    return None  # orjson rejects what is not UTF-8 as well
                template.hits += 1
                return template, text
        if not (raw.startswith(template.event_prefix) and raw.endswith(template.event_suffix)):
            for template in self._templates:
                if raw.startswith(template.event_prefix) and raw.endswith(
                        template.event_suffix):
                    break
            else:
                return None
        return self._read(template, raw, 6 + template.start, len(raw) - 2 - template.after)

    def _fit(self, buf: bytes, lo: int, hi: int) -> tuple[Template, str] | None:
        # ``match`` of the payload ``buf[lo:hi]``, read in place.
        for template in self._templates:
            if buf.startswith(template.prefix, lo) and buf.endswith(template.suffix, lo, hi):
                return self._read(template, buf, lo + template.start, hi - template.after)
        return None

    @staticmethod
    def _read(template: Template, buf: bytes, start: int,
              end: int) -> tuple[Template, str] | None:
        """The hit of ``template`` whose text is the JSON string ``buf[start:end]``, or None
        when that is not one non-empty string."""
        # The shortest non-empty string is '"x"'; the template's bytes end before the
        # opening quote and start after the closing one, which ``json_string`` expects.
        if end - start < 3 or buf[start] != 0x22 or buf[end - 1] != 0x22:
            return None
        text = json_string(buf, start, end)
        if text is None:
            return None  # not one string: a full parse reports what is wrong
        template.hits += 1
        return template, text

    def fill(self, template: Template, text: str) -> list[StreamEvent]:
        """The events of a payload of ``template``'s shape whose text is ``text`` (a hit
        of ``match``): what ``_choice`` makes of that chunk, without the dictionaries."""
        index = template.index
        state = self._choices[index]
        if template.channel is THINKING:
            state.saw_reasoning = True
            return [TextDelta(index, THINKING, text, 1)]
        events: list[StreamEvent] = []
        self._inline(state, index, text, 1, events)
        return events

    def _learn(self, data: bytes, obj: dict[str, Any], choice: dict[str, Any]) -> None:
        """Keep ``data``'s shape as a template when its one choice carries one non-empty
        text value and nothing else this model reads (no usage, tool calls or finish),
        and the rest of it is at most ``_MAX_TEMPLATE_BYTES``."""
        if self.kind == "chat":
            holder = choice.get("delta")
            if not isinstance(holder, dict) or len(holder) != 1:
                return
        else:
            holder = choice
        key = next((k for k in _TEMPLATE_KEYS if k in holder), None)
        text = holder.get(key) if key is not None else None
        if (key is None or (key == "text") != (self.kind != "chat")
                or not isinstance(text, str) or not text
                or choice.get("finish_reason") is not None):
            return
        if b"\n" in data:  # a payload of several ``data:`` lines: no event-level template
            return
        at = data.rfind(b'"' + key.encode() + b'"')
        start = data.find(b'"', at + len(key) + 2) if at >= 0 else -1
        end = string_end(data, start) if start >= 0 else -1
        if end < 0:
            return
        if start + len(data) - end > _MAX_TEMPLATE_BYTES:
            return
        prefix, suffix = data[:start], data[end:]
        probe_text = "q" if text != "q" else "z"
        try:  # the proof: another text in that place changes that value and nothing else
            probe = orjson.loads(prefix + b'"' + probe_text.encode() + b'"' + suffix)
            probe_choice = probe["choices"][0]
            probe_holder = probe_choice["delta"] if self.kind == "chat" else probe_choice
            if probe_holder[key] != probe_text:
                return
            probe_holder[key] = text
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            return
        if probe != obj:
            return
        templates = self._templates
        if len(templates) >= _MAX_TEMPLATES:
            dropped = templates.pop()
            self._dropped_hits += dropped.hits
            if not dropped.hits:
                assert self._fruitless is not None
                self._fruitless += 1
        self._head = Template(prefix, suffix, choice.get("index", 0), _TEMPLATE_KEYS[key])
        templates.insert(0, self._head)

    def _tokens_from_usage(self, usage: Any, has_choices: bool, events: list[StreamEvent]) -> int:
        """Tokens to credit to this chunk's text: the growth of cumulative usage, or -1
        (meaning one per chunk that carries text) when the server sends no usage."""
        if not isinstance(usage, dict):
            return -1
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        if not isinstance(completion, int) or not isinstance(prompt, int):
            return -1
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        events.append(
            Usage(prompt, completion, reasoning if isinstance(reasoning, int) else None,
                  final=not has_choices)
        )
        grown = max(0, completion - self._last_completion)
        self._last_completion = max(self._last_completion, completion)
        self._usage_seen = True
        return grown

    def _choice(self, choice: dict[str, Any], tokens: int, events: list[StreamEvent]) -> int:
        """Append the events of one choice; return the tokens not yet credited to text."""
        index = choice.get("index", 0)
        if not isinstance(index, int):
            raise MalformedChunk("choice index is not an integer")
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = _Choice(self._in_think)
        if self.kind == "chat":
            delta = choice.get("delta")
            if isinstance(delta, dict):
                reasoning = delta.get("reasoning")
                if reasoning is None:
                    reasoning = delta.get("reasoning_content")
                if isinstance(reasoning, str) and reasoning:
                    state.saw_reasoning = True
                    events.append(TextDelta(index, THINKING, reasoning, tokens))
                    tokens = 0
                content = delta.get("content")
                if isinstance(content, str) and content:
                    tokens = self._inline(state, index, content, tokens, events)
                tool_calls = delta.get("tool_calls")
                if isinstance(tool_calls, list) and tool_calls:
                    events.append(ToolCallDelta(index, tool_calls))
        else:
            text = choice.get("text")
            if isinstance(text, str) and text:
                tokens = self._inline(state, index, text, tokens, events)
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            events.append(Finish(index, reason))
        return tokens

    def _inline(self, state: _Choice, index: int, text: str, tokens: int,
                events: list[StreamEvent]) -> int:
        if state.saw_reasoning:  # a reasoning parser runs upstream: content is content
            events.append(TextDelta(index, CONTENT, text, tokens))
            return 0
        # The chunk's tokens are credited to its first piece; the rest come free.
        return state.splitter.deltas(index, text, tokens, events)


def _error_event(err: Any) -> StreamError:
    if isinstance(err, dict):
        code = err.get("code")
        return StreamError(str(err.get("message", "")), code if isinstance(code, int) else None)
    return StreamError(str(err), None)
