"""Pieces every API of the simulated node shares, all pure: the errors a route answers
(:mod:`.errors`), server-sent events (:mod:`.sse`), Go's JSON (:mod:`.gojson`), the
source of random ids (:mod:`.draw`), vLLM's request-model checks (:mod:`.validation`) and
each server's thinking switches (:mod:`.thinking`)."""
