"""The counting tools' shared command line (``benchmarks.counting``): opcodes and
instructions refuse bad numbers and configurations alike, each with its own defaults."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks import counting, instructions, opcodes

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
