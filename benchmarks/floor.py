"""The floor: the cheapest proxies that do the sidecar's job, to measure it against.

Run from the repository root::

    .venv/bin/python -m benchmarks.floor --kind passthrough --listen 127.0.0.1:8101 \\
        --upstream http://127.0.0.1:8001
    .venv/bin/python -m benchmarks.floor --kind parsing --listen 127.0.0.1:8102 \\
        --upstream http://127.0.0.1:8001
    .venv/bin/python -m benchmarks.floor --kind parsing-lean --listen 127.0.0.1:8103 \\
        --upstream http://127.0.0.1:8001

- ``passthrough``: relays ``POST /v1/chat/completions``, ``/v1/completions``,
  ``/v1/messages`` and ``/v1/responses``: status, content type and body bytes as they
  arrive. Nothing else.
- ``parsing``: the same, and also splits the body into SSE events (LF framing, as vLLM
  sends), ``orjson.loads`` each ``data:`` payload and reads its delta text, then forwards
  the original bytes of the completed events. This is the least work any stream-watching
  proxy has to do. The delta text is read in the format of the route: every choice's
  ``delta`` (or ``text``) on chat completions and completions; a ``content_block_delta``'s
  ``thinking``, ``text`` or ``partial_json`` on Anthropic's ``/v1/messages``; the string
  ``delta`` of a ``response.*.delta`` event on OpenAI's ``/v1/responses`` (whose events,
  like Anthropic's, carry an ``event:`` line before their ``data:`` line).
- ``parsing-lean``: ``parsing`` reading the upstream the way the sidecar's watched
  requests do (``sidecar.net.upstream``: HTTP/1.1 on plain asyncio connections) instead of
  through aiohttp's client. Against it, the sidecar's ratio is the cost of its watching
  alone, with the read path the same on both sides.

All use one upstream connection pool per process and uvloop when installed, like the
sidecar. No logging, no metrics, no error mapping: they are floors, not products.
``passthrough`` and ``parsing`` bound the silence between upstream reads with aiohttp's
``sock_read`` timeout (``--read-timeout``, 120 s; 0 for none), which re-arms a timer on
every read; ``parsing-lean`` has no read timeout.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from sidecar.config import Config
from sidecar.net.upstream import UpstreamPool

_DROP = frozenset({"host", "content-length", "transfer-encoding", "connection",
                   "accept-encoding", "keep-alive"})


def delta_text(obj: Any) -> int:
    """The characters of delta text one parsed chunk carries (what a watcher reads)."""
    n = 0
    if not isinstance(obj, dict):
        return 0
    for choice in obj.get("choices") or ():
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("reasoning", "reasoning_content", "content"):
                text = delta.get(key)
                if isinstance(text, str):
                    n += len(text)
        else:
            text = choice.get("text")
            if isinstance(text, str):
                n += len(text)
    return n


def messages_delta_text(obj: Any) -> int:
    """The characters of delta text one parsed Anthropic Messages event carries: a
    ``content_block_delta``'s thinking, text or tool-call JSON."""
    if not isinstance(obj, dict) or obj.get("type") != "content_block_delta":
        return 0
    delta = obj.get("delta")
    if not isinstance(delta, dict):
        return 0
    for key in ("thinking", "text", "partial_json"):
        text = delta.get(key)
        if isinstance(text, str):
            return len(text)
    return 0


def responses_delta_text(obj: Any) -> int:
    """The characters of delta text one parsed OpenAI Responses event carries: the string
    ``delta`` of a ``response.*.delta`` event (reasoning, output text, tool arguments)."""
    if not isinstance(obj, dict):
        return 0
    text = obj.get("delta")
    return len(text) if isinstance(text, str) else 0


Reader = Callable[[Any], int]
#: The delta reader of each route the floors serve.
READERS: dict[str, Reader] = {"/v1/chat/completions": delta_text, "/v1/completions": delta_text,
                              "/v1/messages": messages_delta_text,
                              "/v1/responses": responses_delta_text}


def parse_events(buf: bytes, chunk: bytes, read: Reader = delta_text) -> tuple[bytes, bytes, int]:
    """The parsing floor's work on one read: ``chunk`` appended to ``buf`` (the unfinished
    event so far) is cut after its last ``\n\n``; each completed event's ``data:`` payload
    (its one data line, first or after an ``event:`` line) is parsed and its delta text
    read by ``read``. Returns the completed events' original bytes (empty while no event
    is complete), the new unfinished rest, and the characters read."""
    buf = buf + chunk if buf else chunk
    end = buf.rfind(b"\n\n")
    if end < 0:
        return b"", buf, 0
    done, rest = buf[: end + 2], buf[end + 2 :]
    chars = 0
    for event in done.split(b"\n\n"):
        if event.startswith(b"data: "):
            if event != b"data: [DONE]":
                chars += read(orjson.loads(event[6:]))
        else:
            at = event.find(b"\ndata: ")
            if at >= 0:
                chars += read(orjson.loads(event[at + 7 :]))
    return done, rest, chars


async def relay_parsed(read: Callable[[], Awaitable[bytes]],
                       resp: web.StreamResponse, reader: Reader = delta_text) -> None:
    """The parsing floors' loop: each read goes through :func:`parse_events` (with the
    route's delta ``reader``) and the completed events are written; the rest and the end
    follow the last read."""
    buf = b""
    while chunk := await read():
        done, buf, _chars = parse_events(buf, chunk, reader)
        if done:
            await resp.write(done)
    if buf:
        await resp.write(buf)
    await resp.write_eof()


def make_lean_app(upstream: str) -> web.Application:
    """The ``parsing-lean`` floor: ``parsing`` on the sidecar's watched-request client."""
    app = web.Application()
    pool = UpstreamPool(upstream, 10.0, Config().upstream_keepalive_seconds)

    async def close(_app: web.Application) -> None:
        pool.close()

    app.on_cleanup.append(close)

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _DROP]
        async with await pool.post(request.path, headers, body) as up:
            resp = web.StreamResponse(status=up.status)
            resp.content_type = up.headers.get("Content-Type", "").split(";")[0] or "text/plain"
            await resp.prepare(request)
            await relay_parsed(up.readany, resp, READERS[request.path])
            return resp

    for path in READERS:
        app.router.add_post(path, handle)
    return app


def make_app(upstream: str, *, parsing: bool, read_timeout: float = 120.0) -> web.Application:
    """The floor proxy application."""
    app = web.Application()
    holder: dict[str, aiohttp.ClientSession] = {}

    async def pool(_app: web.Application) -> Any:
        holder["s"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=read_timeout or None),
            auto_decompress=False)
        yield
        await holder["s"].close()

    app.cleanup_ctx.append(pool)

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        async with holder["s"].post(upstream + request.path, data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status)
            resp.content_type = up.content_type
            await resp.prepare(request)
            reader = up.content
            if not parsing:
                while chunk := await reader.readany():
                    await resp.write(chunk)
                await resp.write_eof()
            else:
                await relay_parsed(reader.readany, resp, READERS[request.path])
            return resp

    for path in READERS:
        app.router.add_post(path, handle)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("passthrough", "parsing", "parsing-lean"),
                        required=True)
    parser.add_argument("--listen", default="127.0.0.1:8101", metavar="HOST:PORT")
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8001")
    parser.add_argument("--read-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="aiohttp sock_read timeout on upstream reads (0: none)")
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        pass
    else:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    host, _, port = args.listen.rpartition(":")
    upstream = args.upstream.rstrip("/")
    app = (make_lean_app(upstream) if args.kind == "parsing-lean" else
           make_app(upstream, parsing=args.kind == "parsing", read_timeout=args.read_timeout))
    web.run_app(app,
                host=host, port=int(port), access_log=None, print=None,
                handler_cancellation=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
