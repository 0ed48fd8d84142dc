"""Where a watched response goes: a live SSE or NDJSON stream, or a body built at the end.

The sinks write to the client (the proxy's other half of network I/O); what they write
comes from the pure modules: ``sidecar.splice`` and ``sidecar.ollama`` build the bytes,
``sidecar.aggregate`` the non-streaming bodies. Headers are not sent until the first
byte is, so an upstream failure before it still becomes a plain JSON error with a status.
"""

from __future__ import annotations

import abc
import time
from typing import Any

import orjson
from aiohttp import web

from detectors import Verdict
from sidecar import ollama
from sidecar.aggregate import Aggregator
from sidecar.codecs.ndjson import NDJSONDecoder
from sidecar.errors import UpstreamError, upstream_error_body
from sidecar.exchange import Exchange
from sidecar.net.headers import forward_headers
from sidecar.splice import DONE_EVENT, Head, comment, content_chunk, finish_chunk, usage_chunk
from sidecar.stream import Route
from sidecar.watch import Totals


class Sink(abc.ABC):
    """Where a watched response goes: a live SSE stream, or a JSON body built at the end."""

    aggregator: Aggregator | None = None
    status = 200
    bytes_sent = 0

    def upstream_headers(self, headers: Any) -> None:  # noqa: B027 - a deliberate no-op default
        """The first 200 from upstream: remember its headers for the client response."""

    async def write(self, data: bytes) -> None:  # noqa: B027 - a deliberate no-op default
        """Bytes for a streaming client (ignored by a body sink)."""

    @abc.abstractmethod
    async def relay(self, status: int, headers: Any, body: bytes) -> None:
        """The upstream answered with something other than a 200 stream: pass it on."""

    @abc.abstractmethod
    async def fail(self, err: UpstreamError, head: Head | None) -> None:
        """Report ``err`` to the client: a JSON error, or an in-stream error event."""

    async def splice_start(self, head: Head, verdict: Verdict, action: str, attempt: int,  # noqa: B027 - a deliberate no-op default
                           inline_open: list[int]) -> None:
        """A cut happened and a reissue follows."""

    @abc.abstractmethod
    async def end(self, head: Head, verdict: Verdict, action: str, attempt: int,
                  open_choices: list[int], totals: Totals, usage: bool) -> None:
        """The ladder is over: end every open choice with ``length``."""

    @abc.abstractmethod
    async def finish(self, ex: Exchange) -> web.StreamResponse:
        """Complete the response and return it to aiohttp."""


class StreamSink(Sink):
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self._headers: Any = None
        self._final: web.StreamResponse | None = None

    def upstream_headers(self, headers: Any) -> None:
        # Kept only until the response starts: then they are on the wire, and a stream
        # that waits for its next bytes does not hold them (the response has its copy).
        if self._headers is None and self.response is None:
            self._headers = headers

    async def _prepared(self) -> web.StreamResponse:
        if self.response is None:
            resp = web.StreamResponse(status=200, headers=forward_headers(self._headers or {}))
            if "Content-Type" not in resp.headers:
                resp.content_type = "text/event-stream"
            await resp.prepare(self.request)
            self.response = resp
            self._headers = None
        return self.response

    async def write(self, data: bytes) -> None:
        # Once per chunk: skip the ``_prepared`` coroutine when the response is open.
        resp = self.response
        if resp is None:
            resp = await self._prepared()
        self.bytes_sent += len(data)
        await resp.write(data)

    async def relay(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        resp = web.Response(status=status, body=body, headers=forward_headers(headers))
        self._final = resp

    async def fail(self, err: UpstreamError, head: Head | None) -> None:
        if self.response is None:
            self.status = err.status
            self._final = web.Response(status=err.status, body=upstream_error_body(err),
                                       content_type="application/json")
            return
        await self.write(b"data: " + upstream_error_body(err) + b"\n\n" + DONE_EVENT)

    async def splice_start(self, head: Head, verdict: Verdict, action: str, attempt: int,
                           inline_open: list[int]) -> None:
        parts = [comment(verdict, action, attempt)]
        parts += [content_chunk(head, i, "</think>") for i in inline_open]
        await self.write(b"".join(parts))

    async def end(self, head: Head, verdict: Verdict, action: str, attempt: int,
                  open_choices: list[int], totals: Totals, usage: bool) -> None:
        parts = [comment(verdict, action, attempt)]
        parts += [finish_chunk(head, i, "length") for i in open_choices]
        if usage:
            parts.append(usage_chunk(head, totals.usage()))
        parts.append(DONE_EVENT)
        await self.write(b"".join(parts))

    async def finish(self, ex: Exchange) -> web.StreamResponse:
        if self._final is not None:
            return self._final
        resp = await self._prepared()
        await resp.write_eof()
        return resp


class BodySink(Sink):
    def __init__(self, route: Route, *, hide_reasoning: bool = False) -> None:
        self.aggregator = Aggregator(route, hide_reasoning=hide_reasoning)
        self._headers: Any = None
        self._final: web.StreamResponse | None = None
        self._action: str | None = None

    def upstream_headers(self, headers: Any) -> None:
        if self._headers is None:
            self._headers = headers

    async def relay(self, status: int, headers: Any, body: bytes) -> None:
        self.status = status
        self._final = web.Response(status=status, body=body, headers=forward_headers(headers))

    async def fail(self, err: UpstreamError, head: Head | None) -> None:
        self.status = err.status
        self._final = web.Response(status=err.status, body=upstream_error_body(err),
                                   content_type="application/json")

    async def splice_start(self, head: Head, verdict: Verdict, action: str, attempt: int,
                           inline_open: list[int]) -> None:
        self._action = "reissue"

    async def end(self, head: Head, verdict: Verdict, action: str, attempt: int,
                  open_choices: list[int], totals: Totals, usage: bool) -> None:
        assert self.aggregator is not None
        self._action = action
        for index in open_choices:
            self.aggregator.set_choice_text(index, finish_reason="length")
        self.aggregator.set_usage(totals.usage())
        if not self.aggregator.head:
            self.aggregator.head = {"id": head.id, "created": head.created, "model": head.model}

    async def finish(self, ex: Exchange) -> web.StreamResponse:
        if self._final is not None:
            return self._final
        assert self.aggregator is not None
        headers = forward_headers(self._headers or {}, drop=("content-type",))
        if ex.verdicts and ex.mode != "shadow":
            verdict = ex.verdicts[0]
            headers["X-Runaway-Detector"] = verdict.detector
            headers["X-Runaway-Action"] = self._action or "reissue"
            headers["X-Runaway-Attempts"] = str(ex.attempts)
        body = self.aggregator.body()
        self.bytes_sent = len(body)
        return web.Response(status=200, body=body, headers=headers,
                            content_type="application/json")


class NdjsonStreamSink(StreamSink):
    """A streaming client of Ollama's native API: NDJSON lines; errors after output
    started are an ``{"error": …}`` line; a splice leaves no marker (NDJSON has no
    comments) and ends with one ``done: true`` line."""

    def __init__(self, request: web.Request, kind: ollama.Kind) -> None:
        super().__init__(request)
        self.kind = kind
        self._started = time.monotonic()

    async def fail(self, err: UpstreamError, head: Head | None) -> None:
        if self.response is None:
            self.status = err.status
            self._final = web.Response(status=err.status, body=orjson.dumps({"error": str(err)}),
                                       content_type="application/json")
            return
        await self.write(ollama.error_line(str(err)))

    async def splice_start(self, head: Head, verdict: Verdict, action: str, attempt: int,
                           inline_open: list[int]) -> None:
        if inline_open:
            await self.write(ollama.text_line(self.kind, head.model, _created_at(), "</think>"))

    async def end(self, head: Head, verdict: Verdict, action: str, attempt: int,
                  open_choices: list[int], totals: Totals, usage: bool) -> None:
        await self.write(ollama.final_line(
            self.kind, head.model, _created_at(), done_reason="length",
            prompt_tokens=totals.prompt_tokens, completion_tokens=totals.completion_tokens,
            seconds=time.monotonic() - self._started))


class NdjsonBodySink(NdjsonStreamSink):
    """A ``"stream": false`` client of Ollama's native API: the lines a streaming client
    would have seen, folded into one JSON object."""

    def __init__(self, request: web.Request, kind: ollama.Kind) -> None:
        super().__init__(request, kind)
        self._decoder = NDJSONDecoder()
        self._folder = ollama.Folder(kind)
        self._action: str | None = None

    async def write(self, data: bytes) -> None:
        for item in self._decoder.feed(data):
            if item.data.strip():
                self._folder.add(orjson.loads(item.data))

    async def fail(self, err: UpstreamError, head: Head | None) -> None:
        self.status = err.status
        self._final = web.Response(status=err.status, body=orjson.dumps({"error": str(err)}),
                                   content_type="application/json")

    async def splice_start(self, head: Head, verdict: Verdict, action: str, attempt: int,
                           inline_open: list[int]) -> None:
        self._action = "reissue"
        await super().splice_start(head, verdict, action, attempt, inline_open)

    async def end(self, head: Head, verdict: Verdict, action: str, attempt: int,
                  open_choices: list[int], totals: Totals, usage: bool) -> None:
        self._action = action
        await super().end(head, verdict, action, attempt, open_choices, totals, usage)

    async def finish(self, ex: Exchange) -> web.StreamResponse:
        if self._final is not None:
            return self._final
        if self._folder.error is not None:
            self.status = 500
            return web.Response(status=500, body=orjson.dumps({"error": self._folder.error}),
                                content_type="application/json")
        headers = forward_headers(self._headers or {}, drop=("content-type",))
        if ex.verdicts and ex.mode != "shadow":
            headers["X-Runaway-Detector"] = ex.verdicts[0].detector
            headers["X-Runaway-Action"] = self._action or "reissue"
            headers["X-Runaway-Attempts"] = str(ex.attempts)
        body = self._folder.body()
        self.bytes_sent = len(body)
        resp = web.Response(status=200, body=body, headers=headers)
        resp.content_type, resp.charset = "application/json", "utf-8"
        return resp


def _created_at() -> str:
    """Now, as Ollama's ``created_at`` (RFC 3339 in UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
