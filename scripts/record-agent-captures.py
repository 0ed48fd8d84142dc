#!/usr/bin/env python3
"""Record /v1/messages and /v1/responses captures from a real vLLM server running the
tiny healthy e2e model (it thinks, then answers), for the cases the shared captures lack.

    python scripts/record-agent-captures.py --url http://127.0.0.1:PORT \\
        --out tests/data/captures/vllm-0.32.0-agent-apis-recorded

Start the server as scripts/e2e-vllm.sh does (``--served-model-name tiny-healthy``, the
model directory of ``tests/e2e/tiny_model.py --kind healthy``). Each case stores the body
byte for byte and, beside it, ``<file>.headers.txt`` (status line and headers as received);
``manifest.json`` lists the requests. Standard library only; loopback URLs only.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import pathlib
import sys
import urllib.parse
from typing import Any

MODEL = "tiny-healthy"
PROMPT = "Fix the IndexError in parse_rows()."
MESSAGES = {"model": MODEL, "max_tokens": 1000,
            "messages": [{"role": "user", "content": PROMPT}]}
RESPONSES = {"model": MODEL, "input": PROMPT, "max_output_tokens": 1000}
CASES: list[tuple[str, str, str, dict[str, Any] | None, dict[str, str]]] = [
    ("messages_healthy.sse", "POST", "/v1/messages", {**MESSAGES, "stream": True}, {}),
    ("messages_healthy_nonstream.json", "POST", "/v1/messages", MESSAGES, {}),
    ("messages_request_id_nonstream.json", "POST", "/v1/messages",
     {**MESSAGES, "max_tokens": 5}, {"X-Request-Id": "agent-capture-1"}),
    ("messages_count_tokens_thinking_disabled.json", "POST", "/v1/messages/count_tokens",
     {"model": MODEL, "messages": MESSAGES["messages"], "thinking": {"type": "disabled"}}, {}),
    ("responses_healthy.sse", "POST", "/v1/responses", {**RESPONSES, "stream": True}, {}),
    ("responses_healthy_nonstream.json", "POST", "/v1/responses", RESPONSES, {}),
    ("responses_no_reasoning.sse", "POST", "/v1/responses",
     {**RESPONSES, "stream": True, "include_reasoning": False}, {}),
    ("responses_no_reasoning_nonstream.json", "POST", "/v1/responses",
     {**RESPONSES, "include_reasoning": False}, {}),
    ("responses_request_id_nonstream.json", "POST", "/v1/responses",
     {**RESPONSES, "max_output_tokens": 5, "request_id": "resp_agent_capture_1"}, {}),
    ("error_responses_get_unknown.json", "GET", "/v1/responses/resp_0123456789abcdef", None,
     {}),
    ("error_responses_cancel_unknown.json", "POST",
     "/v1/responses/resp_0123456789abcdef/cancel", None, {}),
    ("error_messages_unknown_model.json", "POST", "/v1/messages",
     {**MESSAGES, "model": "nope"}, {}),
    ("error_messages_max_tokens_too_large.json", "POST", "/v1/messages",
     {**MESSAGES, "max_tokens": 100000}, {}),
    ("error_responses_unknown_model.json", "POST", "/v1/responses",
     {**RESPONSES, "model": "nope"}, {}),
    ("error_responses_max_output_too_large.json", "POST", "/v1/responses",
     {**RESPONSES, "max_output_tokens": 100000}, {}),
]


def record(base: str, out: pathlib.Path) -> None:
    url = urllib.parse.urlsplit(base)
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("only loopback servers are recorded")
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, method, path, body, headers in CASES:
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        payload = None if body is None else json.dumps(body).encode()
        sent = {**headers, **({"Content-Type": "application/json"} if payload else {})}
        conn.request(method, path, body=payload, headers=sent)
        resp = conn.getresponse()
        data = resp.read()
        head = f"HTTP/1.1 {resp.status} {resp.reason}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in resp.getheaders()) + "\r\n"
        (out / name).write_bytes(data)
        (out / f"{name}.headers.txt").write_bytes(head.encode())
        conn.close()
        manifest.append({"file": name, "method": method, "path": path, "request": body,
                         "headers": headers, "status": resp.status})
        print(f"{resp.status} {name} ({len(data)} bytes)", file=sys.stderr)
    (out / "manifest.json").write_text(json.dumps({
        "recorded_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "server": "vLLM 0.32.0 (CPU build), --reasoning-parser qwen3 --dtype float32 "
                  "--enforce-eager --gpu-memory-utilization 0.15 --max-model-len 8192 "
                  "(env VLLM_CPU_KVCACHE_SPACE=1), model tests/e2e/tiny_model.py "
                  "--kind healthy served as tiny-healthy",
        "captures": manifest}, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    record(args.url, args.out)


if __name__ == "__main__":
    main()
