"""The Anthropic Messages API on the simulated node (``/v1/messages``,
``/v1/messages/count_tokens``): the request (:mod:`.request`), the event sequence every
server shares (:mod:`.stream`), vLLM's bytes (:mod:`.vllm`), the other servers' bytes
(:mod:`.servers`) and the handlers (:mod:`.routes`)."""
