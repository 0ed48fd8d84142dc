#!/usr/bin/env python3
"""Record wire captures from real vLLM or llama.cpp servers running the tiny e2e models.

Usage (scripts/e2e-vllm.sh --record and scripts/e2e-llamacpp.sh --record start the servers
and run this):

    python scripts/record-captures.py --out tests/data/captures/e2e \\
        --url loop=http://127.0.0.1:PORT --url leaky=... --url healthy=... --url korean=...
    python scripts/record-captures.py --server llamacpp --out tests/data/captures/llama.cpp \\
        --url loop=http://127.0.0.1:PORT --url leaky=... --url healthy=...

Each case sends one request and stores the response body byte for byte (``.sse`` for streams,
``.json`` for plain bodies, ``.txt`` for header dumps and metrics). ``manifest.json`` lists every
file with the server kind, endpoint, request body and status, so a test can replay the request
against the simulator and compare. Standard library only; only loopback URLs are accepted.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import http.client
import json
import pathlib
import sys
import urllib.parse
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "e2e" / "tiny_model.py"
KINDS = ("loop", "leaky", "healthy", "korean")
QUESTION = "My parser crashes on an empty list. Why?"
USER = [{"role": "user", "content": QUESTION}]
THINK_OFF = {"chat_template_kwargs": {"enable_thinking": False}}
USAGE = {"stream_options": {"include_usage": True}}
SALVAGE_PREFIX = (
    "<think>\nWait, maybe my earlier analysis of this crash was wrong so I should re-read"
    " the stack trace from its first frame again.\n</think>\n\n"
)
SALVAGE = {
    "messages": [*USER, {"role": "assistant", "content": SALVAGE_PREFIX}],
    "continue_final_message": True,
    "add_generation_prompt": False,
}


@dataclass(frozen=True, slots=True)
class Case:
    """One request to record: `file` gets the body, `headers_file` (if set) status + headers."""

    file: str
    kind: str
    path: str
    body: dict[str, Any] | None = None
    method: str = "POST"
    headers_file: str | None = None
    note: str = ""


def chat(model_kind: str, **fields: Any) -> dict[str, Any]:
    """A chat request body for the model of `model_kind` (the default user question)."""
    return {"model": f"tiny-{model_kind}", "messages": USER, **fields}


# The cases both servers record alike (each table below keeps its own order).
LOOP_NONSTREAM = Case(
    "chat_thinking_loop_nonstream.json",
    "loop",
    "/v1/chat/completions",
    chat("loop", max_tokens=48),
    headers_file="response_headers_nonstream.txt",
)

THINKING_OFF_NONSTREAM = Case(
    "chat_thinking_off_nonstream.json",
    "loop",
    "/v1/chat/completions",
    chat("loop", max_tokens=48, **THINK_OFF),
)

LEAKY_THINKING_OFF_LOOP = Case(
    "chat_leaky_thinking_off_loop.sse",
    "leaky",
    "/v1/chat/completions",
    chat("leaky", max_tokens=96, stream=True, **USAGE, **THINK_OFF),
    note="thinking off still loops, in content",
)

LEAKY_THINKING_OFF_NONSTREAM = Case(
    "chat_leaky_thinking_off_nonstream.json",
    "leaky",
    "/v1/chat/completions",
    chat("leaky", max_tokens=96, **THINK_OFF),
)

HEALTHY_THINKING = Case(
    "chat_healthy_thinking.sse",
    "healthy",
    "/v1/chat/completions",
    chat("healthy", max_tokens=1024, stream=True, **USAGE),
    note="301 distinct reasoning tokens, </think>, answer, stop",
)

HEALTHY_NONSTREAM = Case(
    "chat_healthy_nonstream.json",
    "healthy",
    "/v1/chat/completions",
    chat("healthy", max_tokens=1024),
)

N2 = Case(
    "chat_n2.sse",
    "loop",
    "/v1/chat/completions",
    chat("loop", max_tokens=24, n=2, stream=True, **USAGE),
)

RAW_THINK_TAGS = Case(
    "completions_raw_think_tags.sse",
    "loop",
    "/v1/completions",
    {
        "model": "tiny-loop",
        "prompt": f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n",
        "max_tokens": 30,
        "stream": True,
        **USAGE,
    },
    note="no reasoning parsing on /v1/completions: <think> arrives as text",
)


CASES: tuple[Case, ...] = (
    Case("models.json", "loop", "/v1/models", method="GET"),
    Case(
        "chat_thinking_loop_usage.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, stream=True, **USAGE),
        headers_file="response_headers_stream.txt",
        note="thinking loop, include_usage",
    ),
    Case(
        "chat_thinking_loop_continuous_usage.sse",
        "loop",
        "/v1/chat/completions",
        chat(
            "loop",
            max_tokens=48,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        ),
        note="cumulative usage on every chunk",
    ),
    Case(
        "chat_thinking_loop_long.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=512, stream=True, **USAGE),
        note="22 repeats of the 23-token loop: enough for the detectors to fire",
    ),
    LOOP_NONSTREAM,
    Case(
        "chat_thinking_off_answer.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, stream=True, **USAGE, **THINK_OFF),
        note="the reissue: thinking off answers and stops",
    ),
    THINKING_OFF_NONSTREAM,
    LEAKY_THINKING_OFF_LOOP,
    LEAKY_THINKING_OFF_NONSTREAM,
    HEALTHY_THINKING,
    HEALTHY_NONSTREAM,
    Case(
        "chat_korean_loop.sse",
        "korean",
        "/v1/chat/completions",
        chat("korean", max_tokens=96, stream=True, **USAGE),
    ),
    N2,
    Case(
        "chat_n2_nonstream.json", "loop", "/v1/chat/completions", chat("loop", max_tokens=24, n=2)
    ),
    Case(
        "chat_thinking_token_budget_20.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=64, thinking_token_budget=20, stream=True, **USAGE),
        note="vLLM forces </think> after 20 reasoning tokens; this model then answers",
    ),
    Case(
        "chat_leaky_thinking_token_budget_20.sse",
        "leaky",
        "/v1/chat/completions",
        chat("leaky", max_tokens=96, thinking_token_budget=20, stream=True, **USAGE),
        note="the budget ends thinking but the leaky model keeps looping in content",
    ),
    Case(
        "chat_vllm_repetition_detection.sse",
        "loop",
        "/v1/chat/completions",
        chat(
            "loop",
            max_tokens=512,
            stream=True,
            repetition_detection={"max_pattern_size": 64, "min_pattern_size": 4, "min_count": 3},
        ),
    ),
    RAW_THINK_TAGS,
    Case(
        "chat_salvage_continue_final.sse",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", **SALVAGE, "max_tokens": 48, "stream": True, **USAGE},
        note="vLLM 0.32 returns the continuation in reasoning, content stays empty",
    ),
    Case(
        "chat_salvage_continue_final_nonstream.json",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", **SALVAGE, "max_tokens": 48},
    ),
    Case(
        "chat_salvage_leaky.sse",
        "leaky",
        "/v1/chat/completions",
        {"model": "tiny-leaky", **SALVAGE, "max_tokens": 64, "stream": True, **USAGE},
        note="the leaky model loops after the salvaged answer too",
    ),
    Case(
        "error_max_tokens_too_large.json",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=100000),
        headers_file="response_headers_error.txt",
    ),
    Case(
        "error_unknown_model.json",
        "loop",
        "/v1/chat/completions",
        {"model": "nope", "messages": USER, "max_tokens": 8},
    ),
    Case(
        "error_stream_options_without_stream.json",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=8, **USAGE),
    ),
    Case(
        "error_continue_final_with_generation_prompt.json",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", **SALVAGE, "add_generation_prompt": True, "max_tokens": 8},
    ),
    Case(
        "error_bad_thinking_token_budget.json",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=8, thinking_token_budget=-2),
    ),
    Case("metrics.txt", "loop", "/metrics", method="GET"),
)

# llama.cpp's llama-server (scripts/e2e-llamacpp.sh): one server per model, started with
# --alias tiny-KIND, so requests name the same models as on vLLM.
LLAMACPP_KINDS = ("loop", "leaky", "healthy")
LLAMACPP_CASES: tuple[Case, ...] = (
    Case("models.json", "loop", "/v1/models", method="GET"),
    Case("props.json", "loop", "/props", method="GET",
         note="what sidecar.dialects.detect reads for dialect auto"),
    Case(
        "chat_thinking_loop.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, stream=True),
        headers_file="response_headers_stream.txt",
        note="thinking loop; timings on the finish chunk",
    ),
    Case(
        "chat_thinking_loop_usage.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, stream=True, **USAGE),
        note="include_usage: usage and timings on a last chunk with choices []",
    ),
    LOOP_NONSTREAM,
    Case(
        "chat_thinking_off_answer.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, stream=True, **USAGE, **THINK_OFF),
        note="the reissue: chat_template_kwargs enable_thinking false answers and stops",
    ),
    THINKING_OFF_NONSTREAM,
    Case(
        "chat_reasoning_effort_none.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, reasoning_effort="none", stream=True, **USAGE),
        note="reasoning_effort none turns thinking off as well",
    ),
    Case(
        "chat_thinking_budget_tokens_0.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, thinking_budget_tokens=0, stream=True, **USAGE),
        note="budget 0: no reasoning; the forced </think> is hidden, the answer follows",
    ),
    Case(
        "chat_reasoning_budget_tokens_0.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=48, reasoning_budget_tokens=0, stream=True, **USAGE),
        note="the other name of the same budget",
    ),
    Case(
        "chat_thinking_budget_tokens_20.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=64, thinking_budget_tokens=20, stream=True, **USAGE),
        note="llama.cpp forces </think> after 20 reasoning tokens; this model then answers",
    ),
    Case(
        "chat_vllm_thinking_token_budget_20.sse",
        "loop",
        "/v1/chat/completions",
        chat("loop", max_tokens=64, thinking_token_budget=20, stream=True, **USAGE),
        note="vLLM's field is not llama.cpp's: ignored, the loop runs to max_tokens",
    ),
    LEAKY_THINKING_OFF_LOOP,
    LEAKY_THINKING_OFF_NONSTREAM,
    HEALTHY_THINKING,
    HEALTHY_NONSTREAM,
    N2,
    RAW_THINK_TAGS,
    Case(
        "chat_salvage_continue_final.sse",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", **SALVAGE, "max_tokens": 48, "stream": True, **USAGE},
        note="the sidecar's salvage body (vLLM's continue_final_message)",
    ),
    Case(
        "error_context_overflow.json",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", "max_tokens": 8,
         "messages": [{"role": "user", "content": "Hello " * 5000}]},
        headers_file="response_headers_error.txt",
        note="a prompt longer than one slot's context",
    ),
    Case(
        "error_context_overflow.sse",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", "max_tokens": 8, "stream": True,
         "messages": [{"role": "user", "content": "Hello " * 5000}]},
        note="the same, streaming: the error comes before the stream starts",
    ),
    Case(
        "error_unknown_model.json",
        "loop",
        "/v1/chat/completions",
        {"model": "nope", "messages": USER, "max_tokens": 8},
        note="one model per server: the name is not checked",
    ),
    Case(
        "error_messages_missing.json",
        "loop",
        "/v1/chat/completions",
        {"model": "tiny-loop", "max_tokens": 8},
    ),
    Case("slots.json", "loop", "/slots", method="GET", note="idle slots"),
    Case("metrics.txt", "loop", "/metrics", method="GET"),
)
SERVERS = {"vllm": (KINDS, CASES), "llamacpp": (LLAMACPP_KINDS, LLAMACPP_CASES)}


@dataclass(frozen=True, slots=True)
class Reply:
    """What came back: status line, headers in wire order, body bytes."""

    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


def send(base: str, case: Case, timeout: float) -> Reply:
    """Send `case` to `base` (http://127.0.0.1:PORT) and read the whole response."""
    url = urllib.parse.urlsplit(base)
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"refusing non-loopback URL {base}")
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    try:
        payload = None if case.body is None else json.dumps(case.body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(case.method, case.path, body=payload, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        version = "HTTP/1.1" if resp.version == 11 else "HTTP/1.0"
        return Reply(version, resp.status, resp.reason, list(resp.getheaders()), body)
    finally:
        conn.close()


def header_dump(reply: Reply) -> bytes:
    """Status line and headers as received (names as the server spelled them), then the body."""
    lines = [f"{reply.version} {reply.status} {reply.reason}"]
    lines += [f"{name}: {value}" for name, value in reply.headers]
    return ("\n".join(lines) + "\n\n").encode() + reply.body


def server_version(server: str, base: str) -> dict[str, Any]:
    """The manifest's record of which server answered."""
    if server == "vllm":
        reply = send(base, Case("", "loop", "/version", method="GET"), 10)
        return {"vllm_version": json.loads(reply.body).get("version")}
    props = json.loads(send(base, Case("", "loop", "/props", method="GET"), 10).body)
    return {"server": "llama.cpp llama-server", "build_info": props.get("build_info")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="vllm")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--url", action="append", default=[], help="KIND=http://127.0.0.1:PORT")
    parser.add_argument("--server-args", default="", help="server command line, for the manifest")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    kinds, cases = SERVERS[args.server]
    urls = dict(item.split("=", 1) for item in args.url)
    missing = sorted({c.kind for c in cases} - urls.keys())
    if missing:
        parser.error(f"missing --url for {', '.join(missing)}")
    args.out.mkdir(parents=True, exist_ok=True)

    version = server_version(args.server, urls["loop"])
    entries: list[dict[str, Any]] = []
    for case in cases:
        reply = send(urls[case.kind], case, args.timeout)
        (args.out / case.file).write_bytes(reply.body)
        if case.headers_file:
            (args.out / case.headers_file).write_bytes(header_dump(reply))
        entries.append(
            {
                "file": case.file,
                "headers_file": case.headers_file,
                "server": case.kind,
                "method": case.method,
                "path": case.path,
                "request": case.body,
                "status": reply.status,
                "content_type": {k.lower(): v for k, v in reply.headers}.get("content-type"),
                "note": case.note,
            }
        )
        print(f"{reply.status} {case.file} ({len(reply.body)} bytes)")
    name = "vLLM" if args.server == "vllm" else "llama.cpp"
    manifest = {
        "source": f"recorded by scripts/record-captures.py from a local {name} server on loopback",
        "license": "Apache-2.0 (generated by this project; the models are tests/e2e/tiny_model.py)",
        **version,
        "server_args": args.server_args,
        "fixture_sha256": hashlib.sha256(FIXTURE.read_bytes()).hexdigest()[:16],
        "recorded_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "served_models": {kind: f"tiny-{kind}" for kind in kinds},
        "captures": entries,
    }
    text = json.dumps(manifest, ensure_ascii=False, indent=2) + "\n"
    (args.out / "manifest.json").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
