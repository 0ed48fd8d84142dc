"""Pure byte-level codecs: SSE, NDJSON and HTTP/1.1 responses. No I/O, no wire-API
knowledge: bytes in, framed events or lines out."""
