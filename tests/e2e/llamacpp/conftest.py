"""Fixtures for the real llama.cpp end-to-end suite.

``scripts/e2e-llamacpp.sh`` starts one ``llama-server`` per tiny model (``loop``, ``leaky``,
``healthy``: tests/e2e/tiny_model.py converted to GGUF by tests/e2e/tiny_gguf.py) with
``--jinja --reasoning-format deepseek --metrics``, and one sidecar (``dialect = "llamacpp"``)
in front of each, then runs ``pytest -m llamacpp`` with their addresses in
``E2E_LLAMACPP_<KIND>_URL``, ``E2E_LLAMACPP_SIDECAR_<KIND>_URL`` and
``E2E_LLAMACPP_SIDECAR_<KIND>_METRICS_URL``. Every test here is marked ``llamacpp`` and so
deselected by a plain ``pytest`` run; selected without those variables, a test fails and
says how to run it (it never skips).

Clients are the official ``openai`` SDK. Streams are read line by line through the SDK's
``with_streaming_response``, so SSE comments (``: runaway ...``) and the raw event bytes stay
visible, and every data event is validated as an SDK ``ChatCompletionChunk``. The server's
own ``GET /slots`` (``is_processing``) and ``/metrics`` (``llamacpp:tokens_predicted_total``)
are the witnesses for what happened upstream.

How llama.cpp differs from vLLM as a witness: its token counter is updated when a request
ends (a slot is released), not per token, so "generated so far" is read after the fact.
It delivers its stream as it generates (no backlog like vLLM's CPU build): the tiny loop
model is cut at the sidecar's verdict (about 220 tokens, ``periodic``) and llama.cpp stops
within a few tokens of it (about 240 generated in all, the answer included, in the runs so
far); the bounds in the tests are looser than that on purpose (a shared 2-core machine).

Adding a route (the coding-agent APIs, ``/v1/messages`` and ``/v1/responses``): a test
module beside these uses ``node.url(via)`` for the base URL of the sidecar or the server,
``node.wait_idle()`` / ``node.processing()`` for the slots, and ``node.messages(tag)`` for
a fresh user turn; nothing here is specific to chat completions but ``stream``/``complete``.

The fixtures ``e2e_report`` (the run report) and ``spawn_sidecar`` (an extra sidecar with a
test's own config, in front of ``Node.upstream_url``) come from tests/e2e/conftest.py.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[3]
KINDS = ("loop", "leaky", "healthy")
#: Tokens a runaway left alone would generate: most of one slot's context (4096 tokens,
#: the prompt is about 30), so llama.cpp stops it with ``length`` before the context is full.
MAX_TOKENS = 4000


def _load_tiny_model() -> ModuleType:
    # Loaded by path: importing it needs no torch, and this works in any pytest import mode.
    spec = importlib.util.spec_from_file_location(
        "e2e_tiny_model", ROOT / "tests" / "e2e" / "tiny_model.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = _load_tiny_model()


@dataclass(slots=True)
class StreamResult:
    """A chat stream as a client saw it: raw events, every chunk parsed, text joined."""

    status: int
    headers: dict[str, str]
    events: list[str] = field(default_factory=list)
    chunks: list[ChatCompletionChunk] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    events_after_done: int = 0
    reasoning: dict[int, str] = field(default_factory=dict)
    content: dict[int, str] = field(default_factory=dict)
    finish: dict[int, str | None] = field(default_factory=dict)
    usage: CompletionUsage | None = None

    def add(self, chunk: ChatCompletionChunk) -> None:
        """Account one parsed chunk."""
        self.chunks.append(chunk)
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            i = choice.index
            self.reasoning.setdefault(i, "")
            self.content.setdefault(i, "")
            self.finish.setdefault(i, None)
            self.reasoning[i] += reasoning_of(choice.delta) or ""
            self.content[i] += choice.delta.content or ""
            if choice.finish_reason is not None:
                self.finish[i] = choice.finish_reason

    def identity(self) -> set[tuple[str, str]]:
        """The distinct (id, model) pairs seen: one for a well-spliced stream. (llama.cpp
        stamps every chunk with the second it was made, so ``created`` may change within
        one of its own streams.)"""
        return {(c.id, c.model) for c in self.chunks}


def reasoning_of(obj: Any) -> str | None:
    """llama.cpp's ``reasoning_content`` (the SDK keeps unknown fields as extras)."""
    extra = getattr(obj, "model_extra", None) or {}
    value = extra.get("reasoning_content")
    return value if isinstance(value, str) else None


def read_sse(lines: Iterator[str], result: StreamResult) -> None:
    """Parse SSE lines into ``result``: comments kept, data validated as SDK chunks."""
    for line in lines:
        if not line:
            continue
        if line.startswith(":"):
            result.comments.append(line[1:].strip())
            continue
        assert line.startswith("data: "), f"unexpected SSE line {line!r}"
        data = line[len("data: ") :]
        if result.done:
            result.events_after_done += 1
            continue
        result.events.append(data)
        if data == "[DONE]":
            result.done = True
            continue
        obj = json.loads(data)
        if "error" in obj:
            result.errors.append(obj["error"])
            continue
        result.add(ChatCompletionChunk.model_validate(obj))


def http_get(url: str, timeout: float = 5.0) -> str:
    """GET a loopback URL and return the body text; raises on a non-2xx status."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname == "127.0.0.1", f"e2e only talks to loopback, not {url}"
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", errors="replace")
    finally:
        conn.close()
    if not 200 <= resp.status < 300:
        raise OSError(f"GET {url}: status {resp.status}")
    return body


@dataclass(frozen=True, slots=True)
class Node:
    """One tiny model: its llama-server and the sidecar in front of it."""

    kind: str
    model: str
    server_url: str
    sidecar_url: str
    sidecar_metrics_url: str
    gguf_dir: Path

    @property
    def script(self) -> dict[str, Any]:
        """What the model says (from tests/e2e/tiny_model.py)."""
        result: dict[str, Any] = TINY.script(self.kind)
        return result

    @property
    def info(self) -> dict[str, Any]:
        """The model's ``script.json`` (tests/e2e/tiny_model.py ``build``), kept beside
        its GGUF."""
        path = self.gguf_dir / f"{self.model}.script.json"
        info: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return info

    def count_tokens(self, text: str) -> int:
        """How many model tokens ``text`` (output the model produced) is made of. The tiny
        models emit whole words from a known set, so a longest-match split is exact."""
        pieces = sorted(self.info["token_pieces"], key=len, reverse=True)
        count, i = 0, 0
        while i < len(text):
            piece = next((p for p in pieces if text.startswith(p, i)), None)
            assert piece is not None, f"not model output at {i}: {text[i : i + 40]!r}"
            i += len(piece)
            count += 1
        return count

    def url(self, via: str) -> str:
        """Base URL of the sidecar (``via="sidecar"``) or of llama-server (``"llamacpp"``)."""
        return {"sidecar": self.sidecar_url, "llamacpp": self.server_url}[via]

    @property
    def upstream_url(self) -> str:
        """The server's own base URL: what a sidecar in front of it names as upstream
        (``spawn_sidecar`` of tests/e2e/conftest.py reads it)."""
        return self.server_url

    def client(self, via: str = "sidecar", base_url: str | None = None) -> openai.OpenAI:
        """An SDK client without retries, so every request is exactly one request."""
        return openai.OpenAI(
            base_url=(base_url or self.url(via)) + "/v1",
            api_key="e2e",
            max_retries=0,
            timeout=120.0,
        )

    def messages(self, tag: str = "") -> list[dict[str, str]]:
        """A user turn unique to this call: the runaway memory never recalls it, and
        llama.cpp's prompt cache cannot make two calls alike. (The tiny models only look at
        the last prompt token, so the wording does not change what they say.)"""
        return [
            {
                "role": "user",
                "content": f"My parser crashes on an empty list. Why? "
                f"[{tag} {uuid.uuid4().hex[:12]}]",
            }
        ]

    def slots(self) -> list[dict[str, Any]]:
        """llama-server's ``GET /slots``: one object per slot."""
        slots: list[dict[str, Any]] = json.loads(http_get(self.server_url + "/slots"))
        return slots

    def processing(self) -> int:
        """How many slots are generating right now (``is_processing``)."""
        return sum(1 for slot in self.slots() if slot["is_processing"])

    def predicted(self) -> float:
        """``llamacpp:tokens_predicted_total``: tokens generated by requests that ended."""
        for family in text_string_to_metric_families(http_get(self.server_url + "/metrics")):
            for sample in family.samples:
                if sample.name == "llamacpp:tokens_predicted_total":
                    return float(sample.value)
        raise AssertionError("llamacpp:tokens_predicted_total missing (is --metrics set?)")

    def wait_idle(self, timeout: float = 5.0) -> float:
        """Poll until no slot is processing; return how long that took (seconds)."""
        start = time.monotonic()
        while True:
            waited = time.monotonic() - start
            if self.processing() == 0:
                return waited
            if waited > timeout:
                raise AssertionError(f"llama-server still processing after {timeout}s: "
                                     f"{self.slots()}")
            time.sleep(0.02)

    def stream(
        self,
        via: str = "sidecar",
        *,
        headers: dict[str, str] | None = None,
        base_url: str | None = None,
        **body: Any,
    ) -> StreamResult:
        """Send a streaming chat request and read it to the end."""
        client = self.client(via, base_url)
        body.setdefault("model", self.model)
        with client.chat.completions.with_streaming_response.create(
            stream=True, extra_headers=headers or {}, **body
        ) as resp:
            result = StreamResult(resp.status_code, dict(resp.headers))
            read_sse(resp.iter_lines(), result)
        return result

    def complete(
        self,
        via: str = "sidecar",
        *,
        headers: dict[str, str] | None = None,
        base_url: str | None = None,
        **body: Any,
    ) -> tuple[ChatCompletion, dict[str, str], bytes]:
        """Send a non-streaming chat request; return the parsed body, the headers (lower
        case) and the raw body bytes."""
        client = self.client(via, base_url)
        body.setdefault("model", self.model)
        raw = client.chat.completions.with_raw_response.create(extra_headers=headers or {}, **body)
        return raw.parse(), {k.lower(): v for k, v in raw.headers.items()}, raw.content


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"{name} is not set: the llamacpp-marked tests need real llama.cpp servers; "
            "run them with scripts/e2e-llamacpp.sh",
            pytrace=False,
        )
    return value


def _node(kind: str) -> Node:
    up = kind.upper()
    return Node(
        kind=kind,
        model=f"tiny-{kind}",
        server_url=_env(f"E2E_LLAMACPP_{up}_URL"),
        sidecar_url=_env(f"E2E_LLAMACPP_SIDECAR_{up}_URL"),
        sidecar_metrics_url=_env(f"E2E_LLAMACPP_SIDECAR_{up}_METRICS_URL"),
        gguf_dir=Path(_env("E2E_LLAMACPP_GGUF_DIR")),
    )


@pytest.fixture
def loop_node() -> Node:
    """The model that loops inside <think> and answers with thinking off."""
    return _node("loop")


@pytest.fixture
def leaky_node() -> Node:
    """The model that also loops in content with thinking off."""
    return _node("leaky")


@pytest.fixture
def healthy_node() -> Node:
    """The model that thinks ~300 distinct tokens, closes </think> and answers."""
    return _node("healthy")
