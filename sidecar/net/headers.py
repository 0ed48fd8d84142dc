"""Which headers cross the proxy (pure).

Hop-by-hop headers (RFC 9110 §7.6.1), any header named in ``Connection``, and
``Proxy-*`` headers are connection-scoped and never forwarded, in either direction.
``Host`` is set by the client library for the upstream; ``Content-Length`` and
``Transfer-Encoding`` are recomputed by aiohttp for the body actually sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multidict import CIMultiDict

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_RECOMPUTED = frozenset({"host", "content-length"})


def _connection_tokens(headers: Mapping[str, str]) -> set[str]:
    tokens: set[str] = set()
    for value in headers.getall("Connection", []) if isinstance(headers, CIMultiDict) else [
        headers.get("Connection", "")
    ]:
        tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def forward_headers(
    headers: Iterable[tuple[str, str]] | Mapping[str, str],
    *,
    drop: Iterable[str] = (),
) -> CIMultiDict[str]:
    """Copy ``headers`` without hop-by-hop, ``Proxy-*``, ``Host``/``Content-Length`` and
    the lower-case names in ``drop``."""
    src = CIMultiDict(headers)
    skip = HOP_BY_HOP | _RECOMPUTED | _connection_tokens(src) | {d.lower() for d in drop}
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in src.items():
        low = name.lower()
        if low in skip or low.startswith("proxy-"):
            continue
        out.add(name, value)
    return out
