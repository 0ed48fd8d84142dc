"""The OpenAI Responses API on the simulated node (``/v1/responses``): the request
(:mod:`.request`), the item sequence every server shares (:mod:`.stream`), vLLM's bytes
(:mod:`.vllm`), the other servers' bytes (:mod:`.servers`) and the handlers
(:mod:`.routes`)."""
