"""Fixtures for the real-vLLM end-to-end suite.

``scripts/e2e-vllm.sh`` starts one vLLM server per tiny model (``tests/e2e/tiny_model.py``)
and one sidecar in front of each, then runs ``pytest -m vllm`` with their addresses in
``E2E_VLLM_<KIND>_URL``, ``E2E_SIDECAR_<KIND>_URL`` and ``E2E_SIDECAR_<KIND>_METRICS_URL``.
Every test here is marked ``vllm`` and so deselected by a plain ``pytest`` run; selected
without those variables, a test fails and says how to run it (it never skips).

Clients are the official ``openai`` SDK (chat completions, completions, ``/v1/responses``)
and the official ``anthropic`` SDK (``/v1/messages``). Streams are read through the SDK's
``with_streaming_response`` so that SSE comments (``: runaway ...``) stay visible, and every
data event is validated as the SDK's type (``ChatCompletionChunk``; for the coding-agent APIs
see ``agent_wire.py``). vLLM's own ``/metrics`` is the witness for what happened upstream
(requests running, tokens generated, prompt tokens).

How far below ``max_tokens`` a cut lands is bounded loosely on purpose. The sidecar reads
the verdict within a few hundred tokens (the runaway log's ``tokens``), but the CPU build of
vLLM can deliver its stream seconds late: on 2 cores the engine process's main thread
spins (``sched_yield``) waiting for its worker, and the thread that sends outputs to the
API server falls behind. A plain client, no sidecar, measured gaps of up to 35 s in the
tiny models' streams, and some streams arrived whole at the end. Tokens generated in
such a gap exist before anyone downstream can read the first of them, and a disconnect
reaches the engine late. The rig makes that spin sleep instead (``tests/e2e/vllm_site``),
which removed every stall in 30 measured requests; the bounds stay loose in case one
comes back.
So a cut attempt is held to half of ``MAX_TOKENS`` (``CUT_BOUND`` in the test modules),
and a whole ladder of cut attempts to less than one uncut runaway would cost; each test
records the actual figures in the report.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("loop", "leaky", "healthy", "korean")
MAX_TOKENS = 8000  # a runaway left alone would generate all of these (max_model_len is 8192)
#: How many tokens vLLM may have generated beyond what the client has read when a
#: disconnect test closes its stream (``Node.midway``): about a second of the tiny models.
_MIDWAY_AHEAD = 400


def _load(name: str) -> ModuleType:
    # Loaded by path: importing tiny_model needs no torch, and this works in any pytest
    # import mode (the e2e directory is no package).
    spec = importlib.util.spec_from_file_location(f"e2e_{name}", Path(__file__).with_name(
        f"{name}.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


TINY = _load("tiny_model")
#: The coding-agent APIs' streams as a client sees them (tests/e2e/agent_wire.py).
WIRE = _load("agent_wire")


@dataclass(frozen=True, slots=True)
class VllmMetrics:
    """One scrape of vLLM's ``/metrics`` for one served model."""

    running: float
    waiting: float
    generation_tokens: float
    prompt_tokens: float
    success: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        """For the run report."""
        return {
            "num_requests_running": self.running,
            "num_requests_waiting": self.waiting,
            "generation_tokens_total": self.generation_tokens,
            "prompt_tokens_total": self.prompt_tokens,
            "request_success_total": self.success,
        }


@dataclass(slots=True)
class StreamResult:
    """A chat stream as a client saw it: every event parsed, per-choice text joined."""

    status: int
    headers: dict[str, str]
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
        if chunk.usage is not None and not chunk.choices:
            self.usage = chunk.usage
        for choice in chunk.choices:
            i = choice.index
            self.reasoning.setdefault(i, "")
            self.content.setdefault(i, "")
            self.finish.setdefault(i, None)
            self.reasoning[i] += _reasoning(choice.delta) or ""
            self.content[i] += choice.delta.content or ""
            if choice.finish_reason is not None:
                self.finish[i] = choice.finish_reason

    def identity(self) -> set[tuple[str, int, str]]:
        """The distinct (id, created, model) triples seen: one for a well-spliced stream."""
        return {(c.id, c.created, c.model) for c in self.chunks}


def _reasoning(obj: Any) -> str | None:
    """vLLM 0.32 puts reasoning in ``reasoning``; the SDK keeps unknown fields as extras."""
    extra = getattr(obj, "model_extra", None) or {}
    value = extra.get("reasoning", extra.get("reasoning_content"))
    return value if isinstance(value, str) else None


def reasoning_of(message: Any) -> str | None:
    """The reasoning text of a non-streaming ``message`` (None when absent)."""
    return _reasoning(message)


def usage_dict(usage: CompletionUsage | None) -> dict[str, Any] | None:
    """Usage as a plain dict (nulls dropped) for equality checks."""
    if usage is None:
        return None
    return usage.model_dump(exclude_none=True)


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """One response of a coding-agent API as it came: status, headers (lower-case names)
    and the whole body, byte for byte."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed (a non-streaming answer)."""
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class Node:
    """One tiny model: its vLLM server and the sidecar in front of it."""

    kind: str
    model: str
    vllm_url: str
    sidecar_url: str
    sidecar_metrics_url: str

    model_dir: Path

    @property
    def script(self) -> dict[str, Any]:
        """What the model says (from tests/e2e/tiny_model.py)."""
        result: dict[str, Any] = TINY.script(self.kind)
        return result

    def count_tokens(self, text: str) -> int:
        """How many model tokens ``text`` (output the model produced) is made of. The tiny
        models emit whole words from a known set, so a longest-match split is exact."""
        info = json.loads((self.model_dir / "script.json").read_text(encoding="utf-8"))
        pieces = sorted(info["token_pieces"], key=len, reverse=True)
        count, i = 0, 0
        while i < len(text):
            piece = next((p for p in pieces if text.startswith(p, i)), None)
            assert piece is not None, f"not model output at {i}: {text[i : i + 40]!r}"
            i += len(piece)
            count += 1
        return count

    reasoning_of = staticmethod(reasoning_of)
    usage_dict = staticmethod(usage_dict)

    def url(self, via: str) -> str:
        """Base URL of the sidecar (``via="sidecar"``) or of vLLM directly (``"vllm"``)."""
        return {"sidecar": self.sidecar_url, "vllm": self.vllm_url}[via]

    @property
    def upstream_url(self) -> str:
        """The server's own base URL: what a sidecar in front of it names as upstream."""
        return self.vllm_url

    def client(self, via: str = "sidecar", base_url: str | None = None) -> openai.OpenAI:
        """An SDK client without retries, so every request is exactly one request."""
        return openai.OpenAI(
            base_url=(base_url or self.url(via)) + "/v1",
            api_key="e2e",
            max_retries=0,
            timeout=120.0,
        )

    def messages(self, tag: str = "") -> list[dict[str, str]]:
        """A user turn unique to this call: the runaway memory never recalls it. (The tiny
        models only look at the last prompt token, so the wording does not change them.)"""
        return [
            {
                "role": "user",
                "content": f"My parser crashes on an empty list. Why? "
                f"[{tag} {uuid.uuid4().hex[:12]}]",
            }
        ]

    def metrics(self) -> VllmMetrics:
        """Scrape vLLM's ``/metrics`` for this model.

        A scrape that gets no answer in 5 s is tried again, up to three times in all, and
        each such stall is written to the run report (``vllm_metrics_stall``). vLLM's CPU
        build at times stops answering for seconds on a busy 2-core machine (see "How far
        below" above); whether a request still runs is read from the answer, so waiting
        out a stall does not hide one: an attempt that was not aborted is still counted
        as running, or as finished with ``length``, when the answer comes.
        """
        url = self.vllm_url + "/metrics"
        for attempt in range(1, _SCRAPE_TRIES + 1):
            start = time.monotonic()
            try:
                text = _http_get(url)
                break
            except TimeoutError:
                report("vllm_metrics_stall", attempt=attempt, seconds=time.monotonic() - start)
                if attempt == _SCRAPE_TRIES:
                    raise
        values: dict[str, float] = {}
        success: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("model_name") != self.model:
                    continue
                if sample.name == "vllm:request_success_total":
                    reason = sample.labels.get("finished_reason", "")
                    success[reason] = success.get(reason, 0.0) + sample.value
                else:
                    values[sample.name] = values.get(sample.name, 0.0) + sample.value
        return VllmMetrics(
            running=values.get("vllm:num_requests_running", 0.0),
            waiting=values.get("vllm:num_requests_waiting", 0.0),
            generation_tokens=values.get("vllm:generation_tokens_total", 0.0),
            prompt_tokens=values.get("vllm:prompt_tokens_total", 0.0),
            success=success,
        )

    def wait_idle(self, timeout: float = 10.0) -> tuple[VllmMetrics, float]:
        """Poll until vLLM runs nothing for this model; return the scrape and the wait."""
        start = time.monotonic()
        while True:
            m = self.metrics()
            waited = time.monotonic() - start
            if m.running == 0 and m.waiting == 0:
                return m, waited
            if waited > timeout:
                raise AssertionError(f"vLLM still busy after {timeout}s: {m}")
            time.sleep(0.05)

    def midway(
        self,
        tag: str,
        ready: Callable[[list[ChatCompletionChunk]], bool],
        *,
        base_url: str | None = None,
        headers: dict[str, str] | None = None,
        tries: int = 3,
    ) -> tuple[openai.Stream[ChatCompletionChunk], VllmMetrics, int]:
        """A streaming chat request through the sidecar (``base_url``: another one), read
        until ``ready`` accepts the chunks read so far, while vLLM is still generating it
        and has not run far ahead of what the client received: what a test of a client
        disconnect needs (see :meth:`midway_events`)."""
        client = self.client(base_url=base_url)

        def start(attempt_tag: str) -> openai.Stream[ChatCompletionChunk]:
            return client.chat.completions.create(
                model=self.model,
                messages=self.messages(attempt_tag),
                max_tokens=MAX_TOKENS,
                stream=True,
                extra_headers=headers,
            )

        return self.midway_events(tag, start, ready, tries=tries)

    def midway_events(
        self,
        tag: str,
        start: Callable[[str], Any],
        ready: Callable[[list[Any]], bool],
        *,
        tries: int = 3,
    ) -> tuple[Any, VllmMetrics, int]:
        """A streaming request started by ``start(tag)`` (an SDK stream: iterable, with
        ``close()``), read until ``ready`` accepts the events read so far, while vLLM is
        still generating it and has not run far ahead of what the client received. Returns
        the open stream, the scrape from before it and the try it took.

        vLLM's CPU build sometimes generates hundreds or thousands of tokens before it
        delivers the first of them (see "How far below" above); a request can even run to
        ``max_tokens`` before the client has read 20 chunks, and an abort sent then waits
        behind the same backlog. Such a try tests vLLM's backlog, not the disconnect, so it
        is closed, recorded in the run report, and the request is made again with a new
        message, up to ``tries`` times; then the test fails."""
        seen: list[str] = []
        for attempt in range(1, tries + 1):
            before, _ = self.wait_idle(timeout=30.0)
            stream = start(f"{tag}-{attempt}")
            events: list[Any] = []
            for event in stream:
                events.append(event)
                if ready(events):
                    break
            else:
                seen.append(f"try {attempt}: the stream ended after {len(events)} events")
                continue
            now = self.metrics()
            ahead = now.generation_tokens - before.generation_tokens - len(events)
            if now.running == 1 and ahead <= _MIDWAY_AHEAD:
                return stream, before, attempt
            stream.close()
            seen.append(f"try {attempt}: running={now.running:g}, vLLM {ahead:g} tokens ahead "
                        f"of the {len(events)} events the client had")
            report("vllm_ran_ahead", kind=self.kind, try_number=attempt, running=now.running,
                   tokens_ahead=ahead, chunks=len(events))
        pytest.fail("vLLM ran ahead of its own stream in every try; " + "; ".join(seen))

    # -- the coding-agent APIs (/v1/messages, /v1/responses) ---------------------------

    wire = WIRE

    def anthropic(self, via: str = "sidecar", base_url: str | None = None) -> anthropic.Anthropic:
        """An Anthropic SDK client without retries (its base URL has no ``/v1``), one per
        base URL for the session (closed at its end, so no pooled connection is left to
        the garbage collector)."""
        url = base_url or self.url(via)
        client = _AGENT_CLIENTS.get(("anthropic", url))
        if client is None:
            client = anthropic.Anthropic(base_url=url, api_key="e2e", max_retries=0,
                                         timeout=120.0)
            _AGENT_CLIENTS[("anthropic", url)] = client
        return client

    def agent_client(self, api: str, via: str = "sidecar", base_url: str | None = None) -> Any:
        """The official SDK's resource for ``api``: ``messages`` (anthropic) or
        ``responses`` (openai); the clients are kept as :meth:`anthropic` keeps them."""
        if api == "messages":
            return self.anthropic(via, base_url).messages
        url = base_url or self.url(via)
        client = _AGENT_CLIENTS.get(("openai", url))
        if client is None:
            client = self.client(base_url=url)
            _AGENT_CLIENTS[("openai", url)] = client
        return client.responses

    def agent_turn(self, api: str, tag: str, max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
        """The body fields of a fresh one-turn request of ``api`` (see :meth:`messages`)."""
        if api == "messages":
            return {"messages": self.messages(tag), "max_tokens": max_tokens}
        return {"input": self.messages(tag), "max_output_tokens": max_tokens}

    def agent_raw(
        self,
        api: str,
        via: str = "sidecar",
        *,
        base_url: str | None = None,
        headers: dict[str, str] | None = None,
        **body: Any,
    ) -> RawAnswer:
        """Send one request of ``api`` through its SDK and keep the answer byte for byte."""
        body.setdefault("model", self.model)
        resource = self.agent_client(api, via, base_url)
        with resource.with_streaming_response.create(extra_headers=headers or {}, **body) as resp:
            return RawAnswer(resp.status_code, {k.lower(): v for k, v in resp.headers.items()},
                             resp.read())

    def sidecar_metric(self, name: str, **labels: str) -> float:
        """The sum of the main sidecar's samples of ``name`` that carry ``labels``."""
        total = 0.0
        for family in text_string_to_metric_families(_http_get(self.sidecar_metrics_url +
                                                               "/metrics")):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in labels.items()):
                    total += sample.value
        return total

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
    ) -> tuple[ChatCompletion, dict[str, str]]:
        """Send a non-streaming chat request; return the parsed body and the headers."""
        client = self.client(via, base_url)
        body.setdefault("model", self.model)
        raw = client.chat.completions.with_raw_response.create(extra_headers=headers or {}, **body)
        return raw.parse(), {k.lower(): v for k, v in raw.headers.items()}


#: The coding-agent APIs' SDK clients, by SDK and base URL (see ``Node.anthropic``).
_AGENT_CLIENTS: dict[tuple[str, str], Any] = {}


@pytest.fixture(scope="session", autouse=True)
def _close_agent_clients() -> Iterator[None]:
    """Close the coding-agent APIs' SDK clients when the session ends."""
    yield
    for client in _AGENT_CLIENTS.values():
        client.close()
    _AGENT_CLIENTS.clear()


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
        if data == "[DONE]":
            result.done = True
            continue
        obj = json.loads(data)
        if "error" in obj:
            result.errors.append(obj["error"])
            continue
        result.add(ChatCompletionChunk.model_validate(obj))


_SCRAPE_TRIES = 3


def _http_get(url: str, timeout: float = 5.0) -> str:
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


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"{name} is not set: the vllm-marked tests need real vLLM servers; "
            "run them with scripts/e2e-vllm.sh",
            pytrace=False,
        )
    return value


def _node(kind: str) -> Node:
    up = kind.upper()
    return Node(
        kind=kind,
        model=f"tiny-{kind}",
        vllm_url=_env(f"E2E_VLLM_{up}_URL"),
        sidecar_url=_env(f"E2E_SIDECAR_{up}_URL"),
        sidecar_metrics_url=_env(f"E2E_SIDECAR_{up}_METRICS_URL"),
        model_dir=Path(_env("E2E_MODELS_DIR")) / kind,
    )


@pytest.fixture(scope="session", autouse=True)
def _one_process() -> None:
    """The suite runs in one process: every test shares the servers and reads their
    counters (the default test run uses two, pytest-xdist)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("run the real-vLLM suite in one process: add -n 0 "
                    "(scripts/e2e-vllm.sh does)", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _warm_up(_one_process: None) -> None:
    """One short request per model, direct and through the sidecar, before any test: the
    first request on a fresh vLLM server and sidecar is slower (lazy imports, first
    allocations), and the cut-latency assertions are about the steady state."""
    for kind in KINDS:
        if not os.environ.get(f"E2E_SIDECAR_{kind.upper()}_URL"):
            continue  # this batch runs without that model; its tests are not selected
        node = _node(kind)
        for via in ("vllm", "sidecar"):
            node.stream(via, messages=node.messages("warm-up"), max_tokens=300)
        node.wait_idle(timeout=5.0)


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


@pytest.fixture
def korean_node() -> Node:
    """The model with a Korean loop in its thinking."""
    return _node("korean")


def report(name: str, **data: Any) -> None:
    """Append a measurement to the run report (``E2E_REPORT``), which the script prints."""
    path = os.environ.get("E2E_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"test": name, **data}) + "\n")


@pytest.fixture
def e2e_report() -> Any:
    """The run-report writer, as a fixture (tests cannot import this conftest)."""
    return report


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def _spawned_sidecar(node: Node, config: str, tmp_path: Path) -> Iterator[str]:
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text(config, encoding="utf-8")
    port, mport = _free_port(), _free_port()
    log = (tmp_path / "sidecar.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--config",
            str(cfg),
            "--upstream",
            node.upstream_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{mport}",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                log.flush()
                raise AssertionError(
                    f"sidecar exited with {proc.returncode}:\n"
                    + (tmp_path / "sidecar.log").read_text(errors="replace")[-3000:]
                )
            try:
                _http_get(url + "/v1/models", timeout=1.0)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


#: A sidecar config whose only detector is a thinking budget (keys of detectors/config.py
#: and sidecar/config.py), so the thinking-off reissue, which loops in content on the leaky
#: model, runs unwatched: a client can leave while it streams.
BUDGET_ONLY_CONFIG = """\
mode = "enforce"
[detectors]
thinking_token_budget = 40
recurrence_enabled = false
periodic_enabled = false
degeneration_enabled = false
content_enabled = false
[reissue]
ladder = ["no-think"]
max_attempts = 2
[memory]
enabled = false
"""


@pytest.fixture
def budget_only_config() -> str:
    """``BUDGET_ONLY_CONFIG``, as a fixture (tests cannot import this conftest)."""
    return BUDGET_ONLY_CONFIG


@pytest.fixture
def spawn_sidecar(tmp_path: Path) -> Iterator[Any]:
    """Start an extra sidecar with a test-written TOML config in front of a node's server
    (``Node.upstream_url``: vLLM here, llama-server for tests/e2e/llamacpp, which uses this
    fixture too); yields ``start(node, config_text) -> base_url``. Stopped after the test."""
    with contextlib.ExitStack() as stack:
        count = 0

        def start(node: Node, config: str) -> str:
            nonlocal count
            count += 1
            sub = tmp_path / f"sidecar{count}"
            sub.mkdir()
            return stack.enter_context(_spawned_sidecar(node, config, sub))

        yield start
