"""The counting tools' shared command line (``benchmarks.counting``): opcodes and
instructions refuse bad numbers and configurations alike, each with its own defaults."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks import counting, instructions, opcodes
from benchmarks.loadgen import LoadResult

TOOLS: dict[str, Callable[[list[str] | None], int]] = {
    "opcodes": opcodes.main, "instructions": instructions.main}


def _refused(tool: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The error ``tool`` gives for ``argv``: it exits with argparse's status 2 before
    starting anything."""
    with pytest.raises(SystemExit) as exit_:
        TOOLS[tool](argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: "), err
    return err.splitlines()[-1]


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(("argv", "message"), [
    (["--streams", "0"], "argument --streams: must be at least 1, not '0'"),
    (["--streams", "2.5"], "argument --streams: must be a whole number, not '2.5'"),
    (["--max-tokens", "-3"], "argument --max-tokens: must be at least 1, not '-3'"),
    (["--top", "-1"], "argument --top: must be at least 0, not '-1'"),
    (["--duration", "0"], "argument --duration: must be a finite number above 0, not '0'"),
    (["--duration", "inf"], "argument --duration: must be a finite number above 0, not 'inf'"),
    (["--rate", "-5"], "argument --rate: must be a finite number above 0, not '-5'"),
    (["--rate", "nan"], "argument --rate: must be a finite number above 0, not 'nan'"),
    (["--rate", "fast"], "argument --rate: must be a number, not 'fast'"),
])
def test_both_tools_refuse_a_bad_number_by_name(
        tool: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """opcodes and instructions refuse a count below its least, a non-whole count, and a
    duration or rate that is not a finite number above 0, naming the option."""
    assert _refused(tool, argv, capsys).endswith(f"error: {message}")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(("configs", "message"), [
    ("parsing,enforce-turbo", "unknown configuration 'enforce-turbo' (one of passthrough, "),
    ("parsing,", "unknown configuration '' (one of passthrough, "),
    ("parsing,enforce,parsing", "configuration 'parsing' is named twice in --configs"),
    ("parsing,enforce-base", "'*-base' configurations need --baseline DIR"),
])
def test_both_tools_check_the_configurations(
        tool: str, configs: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown, empty or repeated configuration, or a ``*-base`` one without
    ``--baseline``, is refused before any process starts."""
    assert f"error: {message}" in _refused(tool, ["--configs", configs], capsys)


def test_instructions_knows_no_recording_configuration(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each tool checks against its own list: opcodes traces ``enforce-record``,
    instructions does not offer it."""
    assert "unknown configuration 'enforce-record'" in _refused(
        "instructions", ["--configs", "enforce-record"], capsys)
    p = counting.parser("", opcodes.KNOWN, configs="parsing", streams=8, streams_help="",
                        rate=50.0)
    args = p.parse_args(["--configs", "parsing,enforce-record"])
    assert counting.configurations(p, args, opcodes.KNOWN) == ["parsing", "enforce-record"]


def test_the_configurations_come_back_in_order_with_the_numbers_parsed() -> None:
    """Good options parse to numbers; the configurations keep their order (the first is
    the reference); ``*-base`` is accepted with ``--baseline``."""
    p = counting.parser("", instructions.KNOWN, configs="parsing-lean,enforce", streams=4,
                        streams_help="", rate=20.0)
    args = p.parse_args(["--configs", "enforce-base,parsing,enforce", "--baseline", "../old",
                         "--streams", "3", "--rate", "12.5", "--duration", "0.5",
                         "--top", "0"])
    assert counting.configurations(p, args, instructions.KNOWN) == [
        "enforce-base", "parsing", "enforce"]
    assert (args.streams, args.rate, args.duration, args.top, args.max_tokens) == (
        3, 12.5, 0.5, 0, 300)


@pytest.mark.parametrize(("tool", "defaults"), [
    ("opcodes", ["(default parsing,enforce)", "(default 8; the tracer is slow)",
                 "(default 50)", "(default 8)", "(default 12)", "(default 300)"]),
    ("instructions", ["(default parsing-lean,enforce,enforce-pure)", "paced streams (default 4)",
                      "(default 20)", "(default 8)", "(default 12)", "(default 300)"]),
])
def test_each_tool_keeps_its_own_defaults(
        tool: str, defaults: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The shared options carry each tool's own defaults, as its help says."""
    with pytest.raises(SystemExit) as exit_:
        TOOLS[tool](["--help"])
    assert exit_.value.code == 0
    help_text = "".join(capsys.readouterr().out.split())  # argparse wraps at hyphens
    for option in ("--configs", "--streams", "--duration", "--rate", "--max-tokens", "--api",
                   "--top", "--baseline", "--logs"):
        assert option in help_text
    for default in defaults:
        assert "".join(default.split()) in help_text


#: The head and the last lines of a callgrind dump taken with ``--cache-sim=yes``.
_CACHE_DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
fn=(1) main
0 5 1 1 0 0 0 0 0 0
summary: 2000 600 300 40 20 10 4 12 6
totals: 2000 600 300 40 20 10 4 12 6
"""


def _load(chunks: int) -> LoadResult:
    return LoadResult(concurrency=1, rate=1.0, streams=1, chunks=chunks, window_s=1.0,
                      chunks_per_s=1.0, offered_per_s=1.0, gap_p50_ms=0.0, gap_p99_ms=0.0,
                      late_p99_ms=0.0, ttfb_p50_ms=0.0, ttfb_p99_ms=0.0, errors=0,
                      spliced=0, wall_s=1.0, events_per_read=1.0)


def test_instructions_reads_every_count_of_a_dump_by_its_event_name() -> None:
    """A dump's summary is read by the names of its ``events:`` line: instructions alone
    without a cache simulation, the misses with one; a text without them is refused."""
    assert instructions.totals("events: Ir\nsummary: 1234\n") == {"Ir": 1234}
    counts = instructions.totals(_CACHE_DUMP)
    assert (counts["Ir"], counts["DLmr"], counts["DLmw"], counts["ILmr"]) == (2000, 12, 6, 4)
    with pytest.raises(ValueError, match="no events and summary"):
        instructions.totals("summary: 1234\n")  # no names for the numbers


def test_instructions_table_adds_the_misses_per_chunk_when_simulating_the_caches() -> None:
    """The table is per chunk and relative to the first configuration; with the caches
    simulated it also gives each configuration's last-level misses per chunk."""
    results = {"parsing-lean": (_load(100), instructions.totals(_CACHE_DUMP)),
               "enforce": (_load(50), instructions.totals(_CACHE_DUMP))}
    plain = instructions.table(results, cache=False)
    assert plain[0].endswith("| instructions per chunk | x parsing-lean |")
    assert plain[2] == "| parsing-lean | 100 | 1.00 | 0 | 20 | 1.00 |"
    assert plain[3] == "| enforce | 50 | 1.00 | 0 | 40 | 2.00 |"
    cached = instructions.table(results, cache=True)
    assert cached[0].endswith("| LL data read misses per chunk | LL data write misses per "
                              "chunk | LL code misses per chunk |")
    assert cached[1].count("---") == 9
    assert cached[2] == "| parsing-lean | 100 | 1.00 | 0 | 20 | 1.00 | 0.1 | 0.1 | 0.0 |"
    assert cached[3] == "| enforce | 50 | 1.00 | 0 | 40 | 2.00 | 0.2 | 0.1 | 0.1 |"


@pytest.mark.parametrize(("argv", "message"), [
    (["--cache", "0"], "argument --cache: must be at least 1, not '0'"),
    (["--cache", "1.5"], "argument --cache: must be a whole number, not '1.5'"),
    (["--warmup", "0"], "argument --warmup: must be a finite number above 0, not '0'"),
])
def test_instructions_refuses_a_bad_cache_or_warmup(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The cache's size is a whole number of KiB, the warm-up a time above 0."""
    assert _refused("instructions", argv, capsys).endswith(f"error: {message}")


def test_instructions_simulates_a_last_level_of_the_size_asked() -> None:
    """``--cache 1024``: 32 KiB first-level caches, a 1 MiB last level of 64-byte lines."""
    assert instructions.cache_options(1024) == [
        "--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=1048576,16,64"]
