"""The command line shared by the tools that count what a proxy executes per chunk.

``benchmarks.opcodes`` (Python bytecode) and ``benchmarks.instructions`` (machine
instructions) take the same options: the configurations to compare, a small paced load and
how many functions to list. Each tool keeps its own defaults (the tracers differ in speed);
:func:`parser` builds the options, and :func:`configurations` checks them once parsed. A
number that makes no sense (no streams, no time, no rate, ``nan``) is refused with the
option's name, before any process starts.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.loadgen import APIS


def _whole(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, not {text!r}")
    return value


def count(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (streams, tokens)."""
    return _whole(text, 1)


def listed(text: str) -> int:
    """An argparse ``type``: a whole number of at least 0 (functions listed)."""
    return _whole(text, 0)


def positive(text: str) -> float:
    """An argparse ``type``: a finite number above 0 (seconds, tokens per second)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text!r}")
    return value


def parser(description: str, known: Sequence[str], *, configs: str, streams: int,
           streams_help: str, rate: float) -> argparse.ArgumentParser:
    """The options of a counting tool whose configurations are ``known``, with its own
    default ``configs``, ``streams`` (described by ``streams_help``, which the default
    follows) and ``rate``; the rest are the same in both tools."""
    p = argparse.ArgumentParser(
        description=description,
        epilog="Configurations: " + ", ".join(known) + " ('*-base' need --baseline).")
    p.add_argument("--configs", default=configs,
                   help="comma-separated; the first is what the others are compared "
                        f"with (default {configs})")
    p.add_argument("--streams", type=count, default=streams, help=streams_help)
    p.add_argument("--duration", type=positive, default=8.0,
                   help="seconds of counted load per configuration (default 8)")
    p.add_argument("--rate", type=positive, default=rate,
                   help=f"tokens per second of each stream (default {rate:g})")
    p.add_argument("--max-tokens", type=count, default=300,
                   help="tokens per request, as in paced (default 300)")
    p.add_argument("--api", choices=APIS, default="chat",
                   help="the wire API of the load: chat (default), messages "
                        "(/v1/messages) or responses (/v1/responses)")
    p.add_argument("--top", type=listed, default=12,
                   help="functions listed per configuration (default 12)")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="another checkout: 'enforce-base'/'shadow-base' run its sidecar")
    p.add_argument("--logs", type=Path,
                   default=Path(tempfile.gettempdir()) / "runaway-sidecar-bench")
    return p


def configurations(p: argparse.ArgumentParser, args: argparse.Namespace,
                   known: Sequence[str]) -> list[str]:
    """The configurations of ``args.configs``, in order; ``p.error`` (exit 2) if one is
    not ``known``, is named twice, or is a ``*-base`` without ``--baseline``."""
    names: list[str] = args.configs.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown configuration {unknown[0]!r} (one of {', '.join(known)})")
    twice = [n for i, n in enumerate(names) if n in names[:i]]
    if twice:
        p.error(f"configuration {twice[0]!r} is named twice in --configs")
    if any(n.endswith("-base") for n in names) and args.baseline is None:
        p.error("'*-base' configurations need --baseline DIR")
    return names
