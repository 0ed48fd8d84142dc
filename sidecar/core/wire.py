"""The wire-API interface: what one client-facing generating API must provide (pure).

A wire API is one request/response format a client speaks, such as OpenAI's chat
completions or Ollama's ``/api/chat``. Its module owns everything specific to that
format, so the request core and the I/O layer stay format-neutral:

- where it is served (``path``) and what an upstream stream of it looks like
  (``stream_type``);
- reading a request: the policy's view (:meth:`WireApi.view`), what the client asked of
  thinking (:meth:`WireApi.client_thinking`) and the :class:`RequestFacts` the exchange
  keeps;
- the bodies it sends upstream: the watched first attempt, thinking off, and each ladder
  step's reissue;
- per upstream attempt, an :class:`~sidecar.core.attempt.Attempt` that decodes the
  stream into format-neutral events and returns the bytes the client sees;
- per exchange, a :class:`Splicer` that writes what the client sees of a cut (a marker,
  a closed reasoning block, the end of a response, an error), and for a non-streaming
  client a :class:`Fold` that builds the one body it gets; :meth:`WireApi.open` makes
  the three of one exchange, each API with its own concrete types;
- its error-body shape.

What differs between upstream servers behind the same API (vLLM, llama.cpp, SGLang,
Ollama) is another axis: ``sidecar.dialects``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from detectors import Verdict
from detectors.agent_loops import Event
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.attempt import Attempt, AttemptSpec, Totals
from sidecar.dialects import Dialect
from sidecar.errors import UpstreamError
from sidecar.labels import Thinking, WatchedRoute
from sidecar.policy.rules import RequestView


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What handling a watched request needs of its parsed body once the first attempt
    starts. The I/O layer keeps these and the request's bytes while the stream is open,
    not the parsed body: a coding agent's prompt is tens of kilobytes, and a parsed copy
    would hold it a second time for the whole stream. A reissue parses the bytes again."""

    #: The prompt's fingerprint, for the runaway memory.
    fingerprint: str
    #: The client reads a stream (else it gets one body at the end).
    client_stream: bool
    #: Choices asked for (``n``; 1 when the API has no such field).
    choices: int = 1
    #: The client turned thinking off itself.
    thinking_disabled: bool = False
    #: The client gets usage: a non-streaming request, or one that asked for it.
    usage: bool = True
    #: A streaming client asked for cumulative usage on every chunk.
    continuous_usage: bool = False
    #: The client asked not to see reasoning; the sidecar asks for it anyway (it must
    #: watch it) and removes it from what the client gets, as the server would have.
    hide_reasoning: bool = False
    #: A ``salvage`` step can continue this request from its own reasoning.
    salvageable: bool = False
    #: The client's own request fields a reissue changes but the client must see as it
    #: sent them (the Responses API echoes ``reasoning`` in its response objects).
    echo: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Body:
    """A whole JSON response: its status, bytes and the ``charset`` of its
    ``application/json`` media type (None: no parameter)."""

    status: int
    body: bytes
    charset: str | None = None


class Fold(abc.ABC):
    """The one body a non-streaming client gets, built from what a streaming client would
    have seen of every attempt (the API's attempts and splicer feed it)."""

    @abc.abstractmethod
    def response(self) -> Body:
        """The response for the client, once the exchange is over."""


class Splicer(abc.ABC):
    """The client's side of one exchange across its attempts (stateful, one per
    exchange): what the client sees when a stream is cut, a reissue follows, the ladder
    ends the response, or an error arrives after the response started. Each method
    returns the bytes for a streaming client, or, with a :class:`Fold`, adds the same to
    it and returns ``b""``.

    ``marks`` collects what identifies, in a later request's history, the reasoning the
    client got from a cut attempt (a thinking block's signature, a reasoning item's id,
    a digest of the text): the I/O layer keeps each in the runaway memory, and the API's
    :meth:`WireApi.clean_history` replaces that reasoning when it comes back."""

    def __init__(self) -> None:
        self.marks: list[str] = []

    def take_marks(self) -> list[str]:
        """The marks of the cuts since the last call."""
        marks, self.marks = self.marks, []
        return marks

    @abc.abstractmethod
    def cut(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], *, wall: float) -> bytes:
        """``attempt`` (number ``number``) was cut and a reissue follows: a marker, and
        whatever closes what the cut left open of the client's ``open_choices``. ``wall``
        is the time of day (seconds since the epoch)."""

    @abc.abstractmethod
    def end(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], totals: Totals, *, usage: bool, elapsed: float,
            wall: float) -> bytes:
        """``attempt`` was cut and the ladder is over: close what it left open and end
        every open choice as cut at the length limit, with the usage of every attempt
        (``usage``: the client asked for usage; ``elapsed``: the exchange's seconds so
        far)."""

    @abc.abstractmethod
    def error(self, err: UpstreamError) -> bytes:
        """An error after the response started: it travels in the stream."""


class Opened:
    """One exchange's API-side parts, made by :meth:`WireApi.open`: its :class:`Splicer`,
    the :class:`Fold` of a non-streaming client (None for a streaming one), and the maker
    of its upstream attempts, each fed by those two."""

    __slots__ = ("_make", "fold", "splicer")

    def __init__(self, splicer: Splicer, fold: Fold | None,
                 make: Callable[[AttemptSpec], Attempt]) -> None:
        self.splicer, self.fold, self._make = splicer, fold, make

    def attempt(self, spec: AttemptSpec) -> Attempt:
        """One upstream attempt's decoder and bookkeeping."""
        return self._make(spec)


class WireApi(abc.ABC):
    """One client-facing generating API (see the module docstring). Instances are
    stateless and shared by every request; the registry is ``sidecar.apis.REGISTRY``."""

    #: A short name for logs and tests (``openai.chat``, ``ollama.generate``, ...).
    name: str
    #: The ``route`` label its requests are counted and logged under.
    route: WatchedRoute
    #: The ``POST`` path, the same on the client's side and upstream.
    path: str
    #: ``Content-Type`` prefix of an upstream stream of this API.
    stream_type: str
    #: Served only in front of a server with Ollama's native API.
    ollama_native: bool = False

    # -- reading a request -----------------------------------------------------------

    @abc.abstractmethod
    def view(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestView:
        """What the policy rules may look at."""

    @abc.abstractmethod
    def client_thinking(self, body: Mapping[str, Any]) -> Thinking | None:
        """What the client itself asked of thinking in the body, if anything."""

    @abc.abstractmethod
    def facts(self, body: Mapping[str, Any]) -> RequestFacts:
        """The facts the exchange keeps (read from the body the upstream will get)."""

    def max_tokens(self, body: Mapping[str, Any]) -> int | None:
        """The client's generation limit."""
        for key in ("max_completion_tokens", "max_tokens"):
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    def thinking_budget(self, body: Mapping[str, Any]) -> Any:
        """The body's own thinking-token budget field, as given (None when absent)."""
        return body.get("thinking_token_budget")

    # -- request bodies --------------------------------------------------------------

    @abc.abstractmethod
    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        """The thinking-off patches that apply to this API in front of ``dialect``."""

    @abc.abstractmethod
    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        """``body`` with thinking switched off (a policy decision)."""

    def expose_reasoning(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """``body`` changed so the server sends the reasoning the client asked to hide
        (``include_reasoning: false``; the sidecar must watch it), or None when nothing is
        hidden. The tokens are generated either way."""
        if body.get("include_reasoning") is False:
            return {**body, "include_reasoning": True}
        return None

    @abc.abstractmethod
    def first_body(self, body: Mapping[str, Any], facts: RequestFacts) -> dict[str, Any] | None:
        """The first attempt's body when it differs from the client's (a non-streaming
        request is sent upstream as a stream, to be watched), or None."""

    @abc.abstractmethod
    def reissue_body(self, body: Mapping[str, Any], step: str, facts: RequestFacts, *,
                     rules: Sequence[ThinkingOffRule], open_choices: int,
                     reasoning: str = "") -> dict[str, Any]:
        """The body of a ladder step: ``no-think``, ``fallback:MODEL`` (thinking off on
        another model) or ``salvage`` (continue from ``reasoning``, closed), asking for
        the ``open_choices`` choices still open."""

    # -- streams ---------------------------------------------------------------------

    @abc.abstractmethod
    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        """The parts of one exchange: its splicer, the fold of a non-streaming client
        (``dialect``: the server behind, whose body layout the fold may imitate), and the
        maker of its attempts (``request_id`` and ``model``: what the sidecar's own
        events name the response by)."""

    # -- history -----------------------------------------------------------------------

    def history_marks(self, body: Mapping[str, Any]) -> list[str]:
        """The marks (see :class:`Splicer`) of the reasoning this request's history
        carries back, for the runaway memory to recall."""
        return []

    def clean_history(self, body: Mapping[str, Any], cut: set[str]) -> dict[str, Any]:
        """``body`` with the reasoning whose marks are in ``cut`` replaced by
        :data:`CUT_NOTE`: a looped block fed back could start the loop again."""
        return dict(body)

    def agent_history(self, body: Mapping[str, Any], window: int) -> list[Event]:
        """The trailing tool calls and replies of this request's history, oldest first,
        reading at most ``window`` assistant events (``detectors.agent_history``); empty
        for an API with no tool calls."""
        return []

    def with_loop_note(self, body: Mapping[str, Any], note: str) -> dict[str, Any] | None:
        """``body`` with ``note`` added where the model reads it last, on the user's side
        of the conversation (after the tool results); None when the body has no such
        place (its history does not end on the user's side)."""
        return None

    def watchable(self, body: Mapping[str, Any]) -> bool:
        """Whether this request can be watched at all (else it is passed through)."""
        return True

    # -- errors ------------------------------------------------------------------------

    @abc.abstractmethod
    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        """The JSON error body, in this API's shape, that a client gets before its
        response started, for an error of the sidecar's own or the upstream's."""

    def upstream_error_body(self, err: UpstreamError) -> bytes:
        """:meth:`error_body` for ``err``."""
        return self.error_body(err.status, str(err), err.error_type)


CUT_NOTE = ("[runaway-sidecar: this reasoning repeated itself and was cut; it is left out "
            "so that the loop does not start again]")
"""What replaces cut reasoning when a client sends it back in a later request."""
