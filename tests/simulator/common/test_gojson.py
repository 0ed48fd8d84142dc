"""JSON as Go writes it (the Ollama dialect)."""

from __future__ import annotations

from sidecar.simulator.common import gojson


def test_go_json_escapes_html_and_prints_whole_floats() -> None:
    """Go's encoder: <, >, & and U+2028 escaped, 1.0 printed as 1, maps sorted on request."""
    assert gojson.marshal({"b": "<a&b>\u2028", "a": 1.0, "c": 0.5}) == (
        b'{"b":"\\u003ca\\u0026b\\u003e\\u2028","a":1,"c":0.5}')
    assert gojson.marshal({"b": 1, "a": {"d": 2, "c": 3}}, sort_keys=True) == (
        b'{"a":{"c":3,"d":2},"b":1}')
    assert gojson.encode([]) == b"[]\n"
