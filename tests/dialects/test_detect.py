"""dialect = "auto": the pure decision over probe answers, and the probe at start-up
against the simulator in each dialect; plus the per-dialect config the proxy applies."""

from __future__ import annotations

import aiohttp
import pytest

from sidecar.config import DEFAULT_THINKING_OFF_RULES, Config, DialectLadder, ReissueConfig
from sidecar.dialects import DIALECTS, ProbeAnswer, detect, effective_config
from tests.dialects.conftest import DialectStack


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp", "sglang", "ollama"])
async def test_auto_detects_each_simulated_server(dialect_stack: DialectStack,
                                                  dialect: str) -> None:
    """A sidecar with dialect=auto recognises the server it fronts, and is ready."""
    stack = await dialect_stack(dialect, dialect="auto")
    assert stack.proxy.dialect.name == dialect
    assert await stack.proxy.upstream_ready()


async def test_auto_with_ollama_watches_native_routes(dialect_stack: DialectStack) -> None:
    """With auto in front of Ollama the native routes are watched (loop cut, answered)."""
    stack = await dialect_stack("ollama", dialect="auto")
    async with aiohttp.ClientSession() as s:
        body = {"model": "sim-loop", "stream": False,
                "messages": [{"role": "user", "content": "Fix the bug"}]}
        async with s.post(stack.url + "/api/chat", json=body) as r:
            assert r.headers["X-Runaway-Action"] == "reissue"


def test_detect_prefers_ollama_then_llamacpp_then_sglang() -> None:
    """Each server's own probe decides; nothing recognisable is vLLM, flagged uncertain."""
    assert detect({"/api/version": ProbeAnswer(200, "", b'{"version":"0.9.0"}')}
                  ).dialect.name == "ollama"
    assert detect({"/props": ProbeAnswer(404, "llama.cpp")}).dialect.name == "llamacpp"
    assert detect({"/get_model_info": ProbeAnswer(200, "", b'{"model_path":"q"}')}
                  ).dialect.name == "sglang"
    found = detect({"/version": ProbeAnswer(None), "/api/version": ProbeAnswer(404, "", b"")})
    assert (found.dialect.name, found.certain) == ("vllm", False)


def test_effective_config_per_dialect() -> None:
    """Ollama's OpenAI layer gets reasoning_effort rules; a dialect ladder replaces the
    ladder only in front of that dialect; operator rules are kept."""
    cfg = Config(reissue=ReissueConfig(dialect_ladders=(
        DialectLadder("ollama", ("no-think", "fallback:small")),)))
    ollama = effective_config(cfg, DIALECTS["ollama"])
    assert ollama.reissue.ladder == ("no-think", "fallback:small")
    assert ollama.reissue.rules == DIALECTS["ollama"].thinking_off
    llama = effective_config(cfg, DIALECTS["llamacpp"])
    assert llama.reissue.ladder == ("no-think",)
    assert llama.reissue.rules == DEFAULT_THINKING_OFF_RULES
