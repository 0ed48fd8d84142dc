"""Agent loops across turns (issue 39): the rules of detectors.agent_loops.check."""

from __future__ import annotations

import pytest

from detectors.agent_loops import (
    LoopCall,
    LoopConfig,
    LoopFinding,
    Reply,
    Step,
    UserTurn,
    check,
    normalize_text,
)

CONFIG = LoopConfig(repeat_min=5, cycle_min=4, text_min=4)


def steps(calls: list[tuple[str, str, object]], start: int = 1) -> list[Step]:
    """Steps at history indices start, start+2, ... (a call, then its result message)."""
    return [Step(start + 2 * i, name, args, result)
            for i, (name, args, result) in enumerate(calls)]


def kinds(found: tuple[LoopFinding, ...]) -> list[str]:
    return [f.kind for f in found]


def test_repeat_at_threshold_with_evidence() -> None:
    """Five identical calls with identical results: one repeat finding, with the call,
    the count and the history indices of every repeated call."""
    history = [UserTurn(0), *steps([("Grep", '{"pattern":"foo"}', "No matches")] * 5)]
    (found,) = check(history, CONFIG)
    assert found == LoopFinding("repeat", (LoopCall("Grep", '{"pattern":"foo"}'),), 5,
                                (1, 3, 5, 7, 9))


def test_repeat_below_threshold() -> None:
    """Four identical calls are not a loop at repeat_min 5."""
    history = [UserTurn(0), *steps([("Grep", "{}", "none")] * 4)]
    assert check(history, CONFIG) == ()


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_every_run_of_k_or_more(k: int) -> None:
    """Any run of at least K identical calls and results is found, whatever precedes it,
    and the count is the run's length."""
    config = LoopConfig(repeat_min=k, cycle_min=4, text_min=4)
    for length in range(k, k + 4):
        prefix = steps([("Read", f'{{"n":{i}}}', f"file {i}") for i in range(3)])
        run = steps([("Bash", '{"command":"pytest"}', "1 failed")] * length, start=20)
        found = check([UserTurn(0), *prefix, *run], config)
        assert kinds(found) == ["repeat"]
        assert found[0].count == length


def test_polling_is_not_a_loop() -> None:
    """The same call whose result changes each time (a build that progresses) never
    counts, at any length."""
    calls = [("Bash", '{"command":"make status"}', f"building: {i * 10}% done")
             for i in range(10)]
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()


def test_sleep_then_status_polling() -> None:
    """sleep / status alternating, status changing: neither a repeat nor a cycle."""
    calls: list[tuple[str, str, object]] = []
    for i in range(8):
        calls.append(("Bash", '{"command":"sleep 5"}', ""))
        calls.append(("Bash", '{"command":"kubectl get pod"}', f"pod-1 {i}/3 Running"))
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()


def test_test_that_now_passes_then_repeats() -> None:
    """A test re-run after a fix is polling until its result stops changing; from then on
    the identical re-runs count."""
    calls = [("Bash", '{"command":"pytest"}', "1 failed"),
             ("Edit", '{"file":"a.py"}', "ok"),
             ("Bash", '{"command":"pytest"}', "1 passed")]
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()
    more = calls + [("Bash", '{"command":"pytest"}', "1 passed")] * 4
    (found,) = check([UserTurn(0), *steps(more)], CONFIG)
    assert (found.kind, found.count) == ("repeat", 5)


def test_volatile_timings_are_masked() -> None:
    """Results that differ only by a duration, a clock time or a date are the same."""
    calls = [("Bash", '{"command":"pytest"}',
              f"1 failed in 0.{i}3s at 12:0{i}:17 on 2026-01-0{i + 1}") for i in range(5)]
    (found,) = check([UserTurn(0), *steps(calls)], CONFIG)
    assert (found.kind, found.count) == ("repeat", 5)


#: Codex CLI 0.171.0's exec_command output, as its model gets it (scripts/e2e-agents.sh,
#: the tool-call loop run): a fresh random chunk id heads every result.
CODEX_OUTPUT = ("Chunk ID: {chunk}\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
                "Original token count: 48\nOutput:\n1:def parse_rows(rows):\n")


def test_codex_chunk_ids_are_masked() -> None:
    """Codex's exec_command results that differ only by their chunk id are the same."""
    calls = [("exec_command", '{"cmd":"grep -n rows parse_rows.py"}',
              CODEX_OUTPUT.format(chunk=chunk))
             for chunk in ("cddb5a", "d00123", "d4df68", "0a9f1e", "e7c2b4")]
    (found,) = check([UserTurn(0), *steps(calls)], CONFIG)
    assert (found.kind, found.count) == ("repeat", 5)


def test_progress_numbers_are_not_masked() -> None:
    """A changing count or percentage is progress, not noise: no loop."""
    calls = [("Bash", '{"command":"wc -l out.txt"}', f"{100 + i} out.txt") for i in range(6)]
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()


def test_different_arguments_break_the_run() -> None:
    """The same tool with other arguments is another call."""
    calls = [("Read", f'{{"path":"f{i % 2}.py"}}', "same text") for i in range(3)]
    calls += [("Read", '{"path":"f9.py"}', "same text")] * 4
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()


def test_missing_result_breaks_the_run() -> None:
    """A call without a result in the history never matches another."""
    calls: list[tuple[str, str, object]] = [("Grep", "{}", "none")] * 4
    calls.append(("Grep", "{}", None))
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()


def test_user_turns_do_not_end_the_run() -> None:
    """User-role messages between iterations (a harness's reminders, "continue") do not
    hide a call repeated across them with the same result."""
    history: list[Step | Reply | UserTurn] = [UserTurn(0)]
    for i in range(5):
        history += [Step(2 * i + 1, "Grep", "{}", "none"), UserTurn(2 * i + 2)]
    (found,) = check(history, CONFIG)
    assert (found.kind, found.count, found.indices) == ("repeat", 5, (1, 3, 5, 7, 9))


def test_last_reply_ends_the_run() -> None:
    """A history whose last assistant turn is a text-only reply has no tool-call finding
    (the agent ended its turn); a reply between identical calls does not break the run."""
    run = steps([("Grep", "{}", "none")] * 6)
    assert check([UserTurn(0), *run, Reply(20, "No matches."), UserTurn(21)], CONFIG) == ()
    history = [UserTurn(0), *run[:4], Reply(20, "Planning the next check."), UserTurn(21),
               *steps([("Grep", "{}", "none")] * 2, start=22)]
    (found,) = check(history, CONFIG)
    assert (found.kind, found.count, found.indices) == ("repeat", 6, (1, 3, 5, 7, 22, 24))


def test_content_blocks_results() -> None:
    """Results given as content blocks are compared by their text."""
    result = [{"type": "text", "text": "No files found"}]
    history = [UserTurn(0), *steps([("Glob", '{"pattern":"*.rs"}', list(result))] * 5)]
    assert kinds(check(history, CONFIG)) == ["repeat"]
    changing = [("Glob", '{"pattern":"*.rs"}', [{"type": "text", "text": f"{i} files"}])
                for i in range(5)]
    assert check([UserTurn(0), *steps(changing)], CONFIG) == ()


def test_cycle_of_two() -> None:
    """A B A B ... with the same results: a cycle, counted in whole cycles, with both
    calls in order as evidence."""
    calls = [("Read", '{"path":"a.py"}', "A"), ("Edit", '{"path":"a.py"}', "no change")] * 4
    (found,) = check([UserTurn(0), *steps(calls)], CONFIG)
    assert found.kind == "cycle"
    assert found.calls == (LoopCall("Read", '{"path":"a.py"}'),
                           LoopCall("Edit", '{"path":"a.py"}'))
    assert found.count == 4
    assert found.indices == tuple(range(1, 17, 2))


def test_cycle_of_three_below_and_at_threshold() -> None:
    """A B C three times is not yet a cycle at cycle_min 4; four times is."""
    abc = [("Read", "{}", "r"), ("Bash", '{"command":"make"}', "error 1"),
           ("Edit", '{"x":1}', "failed")]
    assert check([UserTurn(0), *steps(abc * 3)], CONFIG) == ()
    (found,) = check([UserTurn(0), *steps(abc * 4)], CONFIG)
    assert (found.kind, found.count, len(found.calls)) == ("cycle", 4, 3)


def test_cycle_with_a_changing_result_is_polling() -> None:
    """sleep / check where the check's result moves on: no cycle."""
    calls: list[tuple[str, str, object]] = []
    for i in range(6):
        calls += [("Bash", '{"command":"sleep 1"}', ""), ("Read", '{"p":"log"}', f"line {i}")]
    assert check([UserTurn(0), *steps(calls)], CONFIG) == ()


def test_repeat_is_not_also_a_cycle() -> None:
    """One call repeated is reported once, as a repeat."""
    history = [UserTurn(0), *steps([("Grep", "{}", "none")] * 12)]
    assert kinds(check(history, CONFIG)) == ["repeat"]


def test_text_replies_repeated() -> None:
    """Text-only replies, the same after folding case, spacing, punctuation and digits, at
    text_min in a row (user turns between them allowed): a text finding with the excerpt."""
    texts = ["I will now fix the bug in parse_rows.", "I will now fix the bug in parse_rows!",
             "i will now fix the  bug in parse_rows", "I will now fix the bug in parse_rows."]
    history: list[Step | Reply | UserTurn] = [UserTurn(0)]
    for i, text in enumerate(texts):
        history += [Reply(2 * i + 1, text), UserTurn(2 * i + 2)]
    history.pop()
    (found,) = check(history, CONFIG)
    assert (found.kind, found.count, found.indices) == ("text", 4, (1, 3, 5, 7))
    assert found.excerpt == texts[-1]
    assert check(history[:-2], CONFIG) == ()


def test_short_or_different_texts_do_not_count() -> None:
    """Short acknowledgements and replies that differ are not a content loop."""
    short = [Reply(i, "Done.") for i in range(6)]
    assert check(short, CONFIG) == ()
    varied = [Reply(i, f"Step {chr(65 + i)}: working on part {chr(65 + i)} now") for i in
              range(6)]
    assert check(varied, CONFIG) == ()


def test_text_run_stops_at_a_tool_call() -> None:
    """A tool call between replies ends the text run."""
    reply = "Let me look at the parser again carefully."
    history = [Reply(1, reply), Reply(2, reply), *steps([("Read", "{}", "x")], start=3),
               Reply(5, reply), Reply(6, reply)]
    assert check(history, CONFIG) == ()


def test_normalize_text() -> None:
    """Folding: case, runs of non-word characters, digits."""
    assert normalize_text("  Retry #12: FAILED!!\n") == "retry 0 failed"


def test_config_validation() -> None:
    """Thresholds below 2 and a window too small for them are refused."""
    with pytest.raises(ValueError, match="at least 2"):
        LoopConfig(repeat_min=1)
    with pytest.raises(ValueError, match="window"):
        LoopConfig(cycle_min=10, window=20)
