"""Property: every response parses with the openai SDK, in every mode and ladder path."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI

from sidecar.config import ReissueConfig
from tests.stack import StackFactory

MODELS = ["sim-loop", "sim-leaky", "sim-healthy", "sim-paraphrase-loop", "sim-cjk-loop",
          "sim-long-thinking"]
LADDERS = [(), ("no-think",), ("salvage",), ("no-think", "salvage"), ("fallback:sim-healthy",)]
_counter = itertools.count()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), mode=st.sampled_from(["enforce", "cut", "shadow", "off"]),
       stream=st.booleans(), n=st.integers(1, 2), ladder=st.sampled_from(LADDERS),
       usage=st.booleans())
async def test_every_response_is_well_formed(make_stack: StackFactory, model: str, mode: str,
                                             stream: bool, n: int, ladder: tuple[str, ...],
                                             usage: bool) -> None:
    """The SDK parses the whole response; every choice ends with a finish reason."""
    stack = await make_stack(reissue=ReissueConfig(ladder=ladder))
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    kwargs: dict[str, object] = {
        "model": model, "n": n, "max_tokens": 1200,
        "messages": [{"role": "user", "content": f"case {next(_counter)}"}],
        "extra_headers": {"X-Runaway-Mode": mode},
    }
    if stream:
        if usage:
            kwargs["stream_options"] = {"include_usage": True}
        finishes: dict[int, str] = {}
        ids = set()
        got_usage = False
        response = await client.chat.completions.create(stream=True, **kwargs)  # type: ignore[call-overload]
        async for chunk in response:
            ids.add(chunk.id)
            got_usage = got_usage or chunk.usage is not None
            for choice in chunk.choices:
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
        assert len(ids) == 1
        assert set(finishes) == set(range(n))
        assert got_usage == usage
    else:
        whole = await client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
        assert [c.index for c in whole.choices] == list(range(n))
        assert all(c.finish_reason for c in whole.choices)
        assert whole.usage is not None
    await client.close()
