"""OpenAI chat completions on the simulated node (``/v1/chat/completions``): the request
(:mod:`.request`), vLLM's bytes (:mod:`.vllm`), the other servers' bytes (:mod:`.servers`)
and the handler with its chunk encoder (:mod:`.routes`)."""
