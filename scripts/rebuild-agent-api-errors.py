"""Rebuild vLLM 0.32.0's answers to malformed /v1/messages and /v1/responses bodies.

    ~/.cache/runaway-sidecar/vllm-venv/bin/python scripts/rebuild-agent-api-errors.py \
        tests/data/captures/vllm-0.32.0-agent-apis/rebuilt_errors.json

Needs the vLLM venv that scripts/e2e-vllm.sh builds (no model, no engine, no network): it
mounts vLLM's own request models (AnthropicMessagesRequest, AnthropicCountTokensRequest,
ResponsesRequest) on a FastAPI app with vLLM's own exception handlers, posts each body of
the JSON file given (a list of {"name", "path", "body"}) and writes back the same list with
"status" and "response" (the body, as text) filled in. These are the errors raised before
any handler runs (pydantic field errors and vLLM's before-validators); the simulator's
tests hold its bodies byte-identical to them. Two of them were also captured from a real
server (error_*_bad_request.json) and match those bytes exactly.
"""

import json
import sys
from argparse import Namespace

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from vllm.entrypoints.anthropic.protocol import (
    AnthropicCountTokensRequest,
    AnthropicMessagesRequest,
)
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
from vllm.entrypoints.serve.exception_handling.register import init_exception_handler

app = FastAPI()
app.state.args = Namespace(log_error_stack=False)
init_exception_handler(app)


@app.post("/v1/messages")
async def messages(request: AnthropicMessagesRequest, raw: Request) -> dict[str, bool]:
    return {"accepted": True}


@app.post("/v1/messages/count_tokens")
async def count_tokens(request: AnthropicCountTokensRequest, raw: Request) -> dict[str, bool]:
    return {"accepted": True}


@app.post("/v1/responses")
async def responses(request: ResponsesRequest, raw: Request) -> dict[str, bool]:
    return {"accepted": True}


def main(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        cases = json.load(fh)
    client = TestClient(app, raise_server_exceptions=False)
    for case in cases:
        resp = client.post(case["path"], content=json.dumps(case["body"]),
                           headers={"content-type": "application/json"})
        case["status"] = resp.status_code
        case["response"] = resp.text
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(cases, fh, indent=1, ensure_ascii=False)
        fh.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
