"""The non-streaming body of OpenAI chat completions and completions, rebuilt from the
stream a streaming client would have seen (pure).

Field order and defaults follow vLLM 0.32's pydantic models (``ChatCompletionResponse``,
``CompletionResponse``, ``UsageInfo``), checked against the captured bodies. With
``layout="llamacpp"`` the body is llama.cpp ``llama-server``'s instead (field order of its
``server-task.cpp``, checked against tests/data/captures/llama.cpp): no null fields,
``content`` always a string, ``reasoning_content`` only when there is reasoning, ``id``
after ``usage``, and the last attempt's ``timings``.

The sidecar sends non-streaming watched requests upstream as streams (with
``include_usage``) so it can watch them; the client still gets a ``chat.completion`` or
``text_completion`` object with vLLM 0.32's field order and nulls (see
``tests/data/captures``). ``OpenAIFold.add(chunk)`` takes every parsed chunk;
``OpenAIFold.body()`` serializes the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from sidecar.apis.openai.chunks import ChunkKind
from sidecar.core.wire import Body, Fold
from sidecar.labels import BodyLayout


class _ChoiceAcc:
    __slots__ = (
        "content",
        "finish_reason",
        "logprobs",
        "reasoning",
        "reasoning_key",
        "role",
        "stop_reason",
        "token_ids",
        "tool_calls",
    )

    def __init__(self) -> None:
        self.role = "assistant"
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_key = "reasoning"
        self.tool_calls: list[dict[str, Any]] = []
        self.logprobs: dict[str, list[Any]] | None = None
        self.finish_reason: str | None = None
        self.stop_reason: Any = None
        self.token_ids: list[int] | None = None


class OpenAIFold(Fold):
    """Accumulates the chunks of one (possibly spliced) response, for the body ``layout``
    of the server behind (``sidecar.dialects.Dialect.body_layout``)."""

    def __init__(self, kind: ChunkKind, *, hide_reasoning: bool = False,
                 layout: BodyLayout = "vllm") -> None:
        self.kind = kind
        self.hide_reasoning = hide_reasoning
        self.layout = layout
        #: llama.cpp's per-response ``timings`` object, from the last chunk that had one.
        self.timings: Any = None
        self.head: dict[str, Any] = {}
        self.choices: dict[int, _ChoiceAcc] = {}
        self.usage: dict[str, Any] | None = None
        self.system_fingerprint: Any = None
        self.prompt_token_ids: Any = None
        self.kv_transfer_params: Any = None

    def add(self, chunk: dict[str, Any], *, index_map: Mapping[int, int] | None = None) -> None:
        """Fold one stream chunk in; ``index_map`` renumbers the choices of a reissue."""
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if "system_fingerprint" in chunk:
            self.system_fingerprint = chunk["system_fingerprint"]
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if chunk.get("kv_transfer_params") is not None:
            self.kv_transfer_params = chunk["kv_transfer_params"]
        if "timings" in chunk:
            self.timings = chunk["timings"]
        for choice in chunk.get("choices") or ():
            index = choice.get("index", 0)
            if index_map is not None:
                index = index_map.get(index, index)
            acc = self.choices.get(index)
            if acc is None:
                acc = self.choices[index] = _ChoiceAcc()
            self._add_choice(acc, choice)

    def _add_choice(self, acc: _ChoiceAcc, choice: dict[str, Any]) -> None:
        if self.kind == "chat":
            delta = choice.get("delta")
            if not isinstance(delta, dict):  # the stream model lets odd deltas through
                delta = {}
            if isinstance(delta.get("role"), str):
                acc.role = delta["role"]
            if isinstance(delta.get("content"), str):
                acc.content.append(delta["content"])
            for key in ("reasoning", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    acc.reasoning.append(delta[key])
                    acc.reasoning_key = key
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                _merge_tool_call(acc.tool_calls, call)
        elif isinstance(choice.get("text"), str):
            acc.content.append(choice["text"])
        lp = choice.get("logprobs")
        if isinstance(lp, dict):
            if acc.logprobs is None:
                acc.logprobs = {}
            for key, value in lp.items():
                if isinstance(value, list):
                    acc.logprobs.setdefault(key, []).extend(value)
        if isinstance(choice.get("token_ids"), list):
            acc.token_ids = (acc.token_ids or []) + choice["token_ids"]
        if choice.get("finish_reason") is not None:
            acc.finish_reason = choice["finish_reason"]
            acc.stop_reason = choice.get("stop_reason")

    def set_usage(self, usage: dict[str, Any]) -> None:
        """Record the (possibly summed over attempts) final usage object."""
        self.usage = usage

    def set_choice_text(self, index: int, *, content: str | None = None,
                        finish_reason: str | None = None) -> None:
        """Overwrite a choice's ending, e.g. when the ladder ends it with ``length``."""
        acc = self.choices.setdefault(index, _ChoiceAcc())
        if content is not None:
            acc.content.append(content)
        if finish_reason is not None:
            acc.finish_reason = finish_reason
            acc.stop_reason = None

    def response(self) -> Body:
        """A 200 with :meth:`body`."""
        return Body(200, self.body())

    def body(self) -> bytes:
        """The response body, serialized like vLLM 0.32 (or llama.cpp, by ``layout``)."""
        if self.layout == "llamacpp":
            return self._llamacpp_body()
        choices = [self._choice_body(i, self.choices[i]) for i in sorted(self.choices)]
        usage = dict(self.usage) if self.usage is not None else {
            "prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0}
        ordered_usage: dict[str, Any] = {
            "prompt_tokens": usage.pop("prompt_tokens", 0),
            "total_tokens": usage.pop("total_tokens", 0),
            "completion_tokens": usage.pop("completion_tokens", 0),
            "prompt_tokens_details": usage.pop("prompt_tokens_details", None),
            "completion_tokens_details": usage.pop("completion_tokens_details", None),
        }
        ordered_usage.update(usage)
        if self.kind == "chat":
            out: dict[str, Any] = {
                "id": self.head.get("id"), "object": "chat.completion",
                "created": self.head.get("created"), "model": self.head.get("model"),
                "choices": choices, "service_tier": None,
                "system_fingerprint": self.system_fingerprint, "usage": ordered_usage,
                "prompt_logprobs": None, "prompt_token_ids": self.prompt_token_ids,
                "prompt_text": None, "kv_transfer_params": self.kv_transfer_params,
                "ec_transfer_params": None, "metrics": None,
            }
        else:
            out = {
                "id": self.head.get("id"), "object": "text_completion",
                "created": self.head.get("created"), "model": self.head.get("model"),
                "choices": choices, "service_tier": None,
                "system_fingerprint": self.system_fingerprint, "usage": ordered_usage,
                "kv_transfer_params": self.kv_transfer_params, "ec_transfer_params": None,
                "metrics": None,
            }
        return orjson.dumps(out)

    def _choice_body(self, index: int, acc: _ChoiceAcc) -> dict[str, Any]:
        content = "".join(acc.content)
        if self.kind == "chat":
            message: dict[str, Any] = {
                "role": acc.role, "content": content or None, "refusal": None,
                "annotations": None, "audio": None, "function_call": None,
            }
            if acc.tool_calls:
                message["tool_calls"] = acc.tool_calls
            reasoning = None if self.hide_reasoning else "".join(acc.reasoning) or None
            message[acc.reasoning_key] = reasoning
            return {
                "index": index, "message": message, "logprobs": acc.logprobs,
                "finish_reason": acc.finish_reason, "stop_reason": acc.stop_reason,
                "token_ids": acc.token_ids, "routed_experts": None,
            }
        return {
            "index": index, "text": content, "logprobs": acc.logprobs,
            "finish_reason": acc.finish_reason, "stop_reason": acc.stop_reason,
            "token_ids": acc.token_ids, "prompt_logprobs": None, "prompt_token_ids": None,
            "routed_experts": None,
        }


    def _llamacpp_body(self) -> bytes:
        choices = []
        for index in sorted(self.choices):
            acc = self.choices[index]
            content = "".join(acc.content)
            if self.kind == "chat":
                message: dict[str, Any] = {"role": acc.role, "content": content}
                reasoning = "" if self.hide_reasoning else "".join(acc.reasoning)
                if reasoning:
                    message["reasoning_content"] = reasoning
                if acc.tool_calls:
                    message["tool_calls"] = acc.tool_calls
                choice: dict[str, Any] = {"finish_reason": acc.finish_reason, "index": index,
                                          "message": message}
                if acc.logprobs is not None:
                    choice["logprobs"] = acc.logprobs
            else:
                choice = {"text": content, "index": index, "logprobs": acc.logprobs,
                          "finish_reason": acc.finish_reason}
            choices.append(choice)
        usage = dict(self.usage) if self.usage is not None else {}
        ordered_usage: dict[str, Any] = {
            "completion_tokens": usage.pop("completion_tokens", 0),
            "prompt_tokens": usage.pop("prompt_tokens", 0),
            "total_tokens": usage.pop("total_tokens", 0),
        }
        ordered_usage.update(usage)
        out: dict[str, Any] = {
            "choices": choices, "created": self.head.get("created"),
            "model": self.head.get("model"), "system_fingerprint": self.system_fingerprint,
            "object": "chat.completion" if self.kind == "chat" else "text_completion",
            "usage": ordered_usage, "id": self.head.get("id"),
        }
        if self.timings is not None:
            out["timings"] = self.timings
        return orjson.dumps(out)


_MAX_TOOL_CALL_GAP = 64


def _merge_tool_call(calls: list[dict[str, Any]], delta: Any) -> None:
    """Fold a streamed tool-call fragment into the list of complete calls."""
    if not isinstance(delta, dict):
        return
    index = delta.get("index", len(calls))
    # vLLM numbers calls 0, 1, 2...; a wild index must not allocate (or loop) its way there.
    if not isinstance(index, int) or not 0 <= index <= len(calls) + _MAX_TOOL_CALL_GAP:
        return
    while len(calls) <= index:
        calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    call = calls[index]
    if delta.get("id"):
        call["id"] = delta["id"]
    if delta.get("type"):
        call["type"] = delta["type"]
    fn = delta.get("function")
    if isinstance(fn, dict):
        if isinstance(fn.get("name"), str):
            call["function"]["name"] += fn["name"]
        if isinstance(fn.get("arguments"), str):
            call["function"]["arguments"] += fn["arguments"]
