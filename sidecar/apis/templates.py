"""Learned byte templates of whole SSE events that carry one text delta (pure).

Most events of an Anthropic Messages or OpenAI Responses stream are text deltas whose
bytes differ from the previous one's only in the text, and on the Responses API in the
``sequence_number`` that follows it. :class:`EventTemplates` learns the bytes of such an
event around those values from an event parsed in full, proves them by parsing a variant,
and then reads a later event of the same shape by parsing its text string alone (and
reading its number's digits): what a full parse of the event would give for those two
values, everything else being the learned event's.

A template's ``prefix`` runs from the start of the event (its ``event:`` line, if any,
and ``data: ``) to the text's opening quote, included; then come the JSON string, and
either the ``suffix`` (from the closing quote to the blank line that ends the event) or,
with a number hole, ``mid`` (from the closing quote to the number), the number's digits
and the ``suffix``. The JSON string between holds no raw CR or LF (JSON forbids them) and
the fixed parts hold one ``data:`` line and no other line break, so a match is exactly
one whole event of the learned shape (the caller knows the bytes start an event:
``SSEDecoder.idle``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from types import FunctionType
from typing import Any, Final

import orjson

_MAX_TEMPLATES = 4  # a stream alternates between few shapes (reasoning, text)
_MAX_FRUITLESS = 4  # templates dropped without a single hit before learning stops
_MAX_FAILED = 16  # delta events that could not become a template before learning stops
#: Largest fixed part of an event kept as a template (its bytes less the text and number).
_MAX_TEMPLATE_BYTES = 1024
#: Longest number read through a template: orjson reads up to 64-bit integers; a longer
#: one (never sent) is left to a full parse, which reports it.
_MAX_DIGITS: Final[int] = 15


#: The fixed parts of templates, one bytes object for equal bytes across streams: most are
#: the same on every stream of a server (an event name, a key order), and one object that
#: every stream reads stays in the CPU caches where a copy per stream would not. Bounded:
#: once full, parts are kept as they came.
_SHARED: dict[bytes, bytes] = {}
_MAX_SHARED = 1024


#: Texts ``json_string`` read without a parser, by their bytes, for every stream: a stream's
#: tokens repeat (" the", ","), and a lookup costs a fraction of the checks and the
#: decoding. Bounded in entries and in bytes per text; once full, texts are decoded each
#: time.
_TEXTS: Final[dict[bytes, str]] = {}
_MAX_TEXTS: Final[int] = 2048
_MAX_TEXT_BYTES: Final[int] = 16


#: A JSON string's text without an escape: its UTF-8 bytes, none of them a quote, a
#: backslash or a control character (the characters JSON forbids raw in a string).
PLAIN_TEXT: Final[bytes] = rb'([^"\\\x00-\x1f]+)'
#: A plain non-negative integer that ``match`` reads (no leading zero, at most
#: ``_MAX_DIGITS`` digits).
_NUMBER: Final[bytes] = rb"(0|[1-9][0-9]{0,%d})" % (_MAX_DIGITS - 1)

#: The whole-event matchers of templates, one per shape for every stream (as ``_SHARED``).
_MATCHERS: dict[tuple[bytes, int, bool], Callable[[bytes, int], re.Match[bytes] | None]] = {}


def shared_matcher(suffix: bytes, mid: int = -1, *,
                   quote: bool = False) -> Callable[[bytes, int], re.Match[bytes] | None]:
    """The ``fullmatch`` (from a position) of the rest of an event from its text on
    (from the opening quote, with ``quote``), when the text holds no escape (group 1,
    its UTF-8 bytes) and it ends in the bytes ``suffix``; with ``mid`` (not negative),
    the text is followed by a quote and ``mid`` more bytes (group 2, to compare with the
    template's mid) and a plain number (group 3). Shared as ``shared_part`` shares bytes:
    the suffix and the mid's length are the same on every stream of a server, where the
    mid's bytes may name the stream's item."""
    key = (suffix, mid, quote)
    found = _MATCHERS.get(key)
    if found is None:
        source = b'"' + PLAIN_TEXT if quote else PLAIN_TEXT
        if mid >= 0:
            source += b'(".{%d})' % mid + _NUMBER
        found = re.compile(source + re.escape(suffix)).fullmatch
        if len(_MATCHERS) < _MAX_SHARED:
            _MATCHERS[key] = found
    return found


def shared_part(part: bytes) -> bytes:
    """``part``, or the equal bytes object already shared."""
    found = _SHARED.get(part)
    if found is not None:
        return found
    if len(_SHARED) < _MAX_SHARED:
        _SHARED[part] = part
    return part


class EventTemplate:
    """The bytes of one event shape around its text (and number); see the module
    docstring. ``tag`` is the caller's: what it needs to know of an event of this shape
    (which kind of delta it is)."""

    __slots__ = ("after", "hits", "mid", "prefix", "rest", "skip", "start", "suffix", "tag")

    def __init__(self, prefix: bytes, mid: bytes | None, suffix: bytes, tag: object) -> None:
        self.prefix = shared_part(prefix)
        self.mid = mid
        self.skip = len(mid or b"")  # from the mid's start to the number's
        self.suffix = shared_part(suffix)
        self.start = len(prefix) - 1  # the text's opening quote
        self.after = len(suffix)
        self.tag = tag
        self.hits = 0
        #: The rest of an event from its text on, when the text holds no escape
        #: (``shared_matcher``), from the offset ``len(prefix)``.
        self.rest = shared_matcher(self.suffix, -1 if mid is None else len(mid) - 1)


def string_end(data: bytes, start: int) -> int:
    """The offset just past the JSON string that opens at ``data[start]`` (a quote), or -1."""
    pos = start + 1
    while True:
        pos = data.find(b'"', pos)
        if pos < 0:
            return -1
        slashes = 0
        while data[pos - 1 - slashes] == 0x5C:  # backslash
            slashes += 1
        if slashes % 2 == 0:
            return pos + 1
        pos += 1


#: Whether templates read an event through their regular expression first (``match``):
#: in the pure build, where it takes a third of the bytecodes of the byte tests; not in
#: the compiled one, where the byte tests are native code and the call into ``re`` costs
#: more than they do (``benchmarks.hotpath``: 0.5 µs more an event). mypyc makes a
#: module's functions built-in ones.
PLAIN_FIRST: Final[bool] = isinstance(string_end, FunctionType)


def json_string(raw: bytes, start: int, end: int) -> str | None:
    """The JSON string ``raw[start:end]`` (quotes included) decoded, or None when it is not
    one string. Without an escape, a quote or a character a JSON string may not hold raw
    (a control character: not printable), its bytes are its UTF-8 text: decoded without
    a JSON parser, which costs an allocation and a call per event; a short one is kept
    (``_TEXTS``) and looked up the next time. A span with a raw line break is None
    without a parser."""
    inner = raw[start + 1 : end - 1]
    text = _TEXTS.get(inner)
    if text is not None:
        return text
    if 0x5C not in inner and 0x22 not in inner:  # no backslash, no quote
        try:
            text = inner.decode()
        except UnicodeDecodeError:
            return None  # orjson rejects what is not UTF-8 as well
        if text.isprintable():
            if len(inner) <= _MAX_TEXT_BYTES and len(_TEXTS) < _MAX_TEXTS:
                _TEXTS[inner] = text
            return text
    if 0x0A in inner:
        # A raw line break is in no JSON string: this is more than one event (a read that
        # carried several, whose first and last events matched a template's ends). The
        # parser would say so by raising, and its error object is built in Python: 3 µs,
        # on every read that carries several events while the proxy is behind.
        return None
    try:
        value = orjson.loads(raw[start:end])
    except orjson.JSONDecodeError:
        return None  # not one string: a full parse reports what is wrong
    return value if type(value) is str else None


def _lookup(obj: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


class EventTemplates:
    """The templates one stream learned (at most four, the most recently learned first).

    ``match`` reads a whole event of a learned shape; ``learn`` is offered events parsed in
    full. Learning stops once four templates were dropped without ever matching (a stream
    whose delta events differ in more than the holes: nothing to gain), or sixteen delta
    events could not be learned (a shape these templates cannot hold)."""

    __slots__ = ("_dropped_hits", "_failed", "_fruitless", "_head", "_plain", "_templates",
                 "number", "tag")

    def __init__(self, *, plain_first: bool = PLAIN_FIRST) -> None:
        """``plain_first``: try a template's regular expression first (see
        :data:`PLAIN_FIRST`; both ways read the same)."""
        self._plain = plain_first
        self._templates: list[EventTemplate] = []
        # ``_templates[0]``, or None: read without the list (one object less to fetch
        # from memory per event, see ``Attempt.__init__``).
        self._head: EventTemplate | None = None
        #: The tag of the template of the last event ``match`` read, and its number.
        self.tag: object = None
        self.number: int | None = None
        self._fruitless = 0
        self._failed = 0
        self._dropped_hits = 0

    @property
    def learning(self) -> bool:
        """Whether events parsed in full may still become templates."""
        return self._fruitless < _MAX_FRUITLESS and self._failed < _MAX_FAILED

    @property
    def hits(self) -> int:
        """How many events were read through a template (not parsed in full)."""
        return self._dropped_hits + sum(t.hits for t in self._templates)

    def match(self, raw: bytes) -> str | None:
        """The text (not empty) of the whole event ``raw``, when it has the shape of a
        learned template: that template's tag is then :attr:`tag` and the event's number
        :attr:`number` (None for a template without a number hole). None, when only a
        full parse can read ``raw``: no template fits, or the text's place holds no single
        JSON string, or the number's place no plain non-negative integer."""
        template = self._head  # the last learned: the one nearly every event has
        if template is None:
            return None
        # Nearly every event: the head's shape, a text without an escape, a plain number.
        # One regular expression reads all but the prefix (a fraction of the steps of the
        # general path below, in the pure build).
        found = (template.rest(raw, template.start + 1)
                 if self._plain and raw.startswith(template.prefix) else None)
        if found is not None:
            mid = template.mid
            if mid is None:
                number = None
            elif found[2] == mid:
                number = int(found[3])
            else:  # the same shape but for the mid (another item's)
                return self._match(raw)
            try:
                text = found[1].decode()
            except UnicodeDecodeError:
                return None  # orjson rejects what is not UTF-8 as well
            template.hits += 1
            self.tag = template.tag
            self.number = number
            return text
        return self._match(raw)

    def _match(self, raw: bytes) -> str | None:
        """``match``, for any template and text."""
        for template in self._templates:
            if raw.startswith(template.prefix) and raw.endswith(template.suffix):
                break
        else:
            return None
        tail = len(raw) - template.after
        start = template.start
        mid = template.mid
        if mid is None:
            end = tail + 1  # the suffix starts with the closing quote
            if end - start < 3:  # the shortest non-empty string, '"x"'
                return None
            number: int | None = None
        else:
            # The digits run back from the suffix to the mid, which ends in a non-digit
            # (the number's key and colon): the mid's place is the one ``rfind`` would
            # find, without searching for it. Read back to at most one digit more than a
            # number may hold, byte by byte: native code in the compiled build, without
            # the slices and the parse of ``int`` (the pure build reads most events
            # through ``rest`` instead).
            value = 0
            scale = 1
            pos = tail
            floor = max(start, tail - _MAX_DIGITS - 1)
            while pos > floor:
                digit = raw[pos - 1] - 0x30
                if digit < 0 or digit > 9:
                    break
                value += digit * scale
                scale *= 10
                pos -= 1
            digits = tail - pos
            if not 0 < digits <= _MAX_DIGITS or (raw[pos] == 0x30 and digits > 1):
                return None
            # The mid starts with the closing quote, which a non-empty string puts at
            # ``start + 2`` or later.
            # (A slice compared costs a fifth of ``startswith`` with an offset, a call
            # through the method's argument parsing in the compiled build.)
            at = pos - template.skip
            if at < start + 2 or raw[at:pos] != mid:
                return None
            end = at + 1
            number = value
        text = json_string(raw, start, end)
        if text is None:
            return None
        template.hits += 1
        self.tag = template.tag
        self.number = number
        return text

    def learn(self, raw: bytes, data: bytes, obj: dict[str, Any], path: Sequence[str],
              tag: object, number_key: str | None = None) -> None:
        """Keep the shape of the event ``raw`` (whose one ``data`` line is ``data``,
        parsed to ``obj``) as a template, when its text at ``path`` is a non-empty string
        and a variant with another text (and, when ``obj`` has an integer at the top-level
        ``number_key`` after the text, another number) parses to ``obj`` with only those
        values changed."""
        if not self.learning:
            return
        text = _lookup(obj, path)
        if not isinstance(text, str) or not text:
            return
        template = self._shape(raw, data, obj, path, text, tag, number_key)
        if template is None:
            self._failed += 1
            return
        templates = self._templates
        if len(templates) >= _MAX_TEMPLATES:
            dropped = templates.pop()
            self._dropped_hits += dropped.hits
            if not dropped.hits:
                self._fruitless += 1
        templates.insert(0, template)
        self._head = template

    @staticmethod
    def _shape(raw: bytes, data: bytes, obj: dict[str, Any], path: Sequence[str], text: str,
               tag: object, number_key: str | None) -> EventTemplate | None:
        """The proven template of ``raw``'s shape (see ``learn``), or None."""
        if b"\n" in data or b"\r" in raw:
            return None
        head = raw[: len(raw) - len(data) - 2]
        if not raw.endswith(b"\n\n") or raw[len(head) : -2] != data or not (
                head == b"data: " or (head.startswith(b"event: ") and head.endswith(b"\ndata: ")
                                      and head.count(b"\n") == 1)):
            return None
        key = path[-1].encode()
        at = data.rfind(b'"' + key + b'":')
        start = data.find(b'"', at + len(key) + 3) if at >= 0 else -1
        end = string_end(data, start) if start >= 0 else -1
        if end < 0:
            return None
        number = obj.get(number_key) if number_key is not None else None
        mid: bytes | None = None
        probe_number: int | None = None
        probe_tail = data[end:]
        suffix = data[end - 1 :] + b"\n\n"
        if number_key is not None and type(number) is int and number >= 0:
            name = b'"' + number_key.encode() + b'":'
            digits = str(number).encode()
            pos = data.find(name, end)
            if pos < 0 or not data.startswith(digits, pos + len(name)):
                return None
            pos += len(name)
            after = data[pos + len(digits) :]
            if after[:1].isdigit():
                return None
            mid = data[end - 1 : pos]
            probe_number = number + 1
            probe_tail = data[end:pos] + str(probe_number).encode() + after
            suffix = after + b"\n\n"
        prefix = head + data[: start + 1]
        if len(prefix) + len(mid or b"") + len(suffix) > _MAX_TEMPLATE_BYTES:
            return None
        probe_text = "q" if text != "q" else "z"
        try:  # the proof: other values in those places change them and nothing else
            probe = orjson.loads(data[:start] + b'"' + probe_text.encode() + b'"' + probe_tail)
        except orjson.JSONDecodeError:
            return None
        if _lookup(probe, path) != probe_text:
            return None
        holder = probe
        for k in path[:-1]:
            holder = holder[k]
        holder[path[-1]] = text
        if number_key is not None and probe_number is not None:
            if probe.get(number_key) != probe_number:
                return None
            probe[number_key] = number
        if probe != obj:
            return None
        return EventTemplate(prefix, mid, suffix, tag)
