"""Labelling recorded traces from a terminal, driven through its standard input: loop
(with its onset), healthy, ambiguous, skip, undo and quit, saved beside the traces
without touching them."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sidecar.traces.label import Session, run_label
from sidecar.traces.store import LABELS_FILE, load, read_marks

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
LOOP_WORDS = "Let me check the ferry schedule once more"


def records() -> list[dict[str, Any]]:
    """Three recorded-looking traces: a detection, a healthy one, a third."""
    verdict = {"detector": "restatement", "channel": "thinking", "reason": "a line 8 times",
               "excerpt": LOOP_WORDS, "period": 0, "count": 8, "at_token": 700,
               "at_char": 7 + 400}
    loop = "First I read the question.\n" * 10 + (LOOP_WORDS + ".\n") * 40
    return [
        {"id": "a1", "model": "m", "kind": "detection", "mode": "shadow",
         "text": "<think>" + loop, "thinking_tokens": 700, "verdict": verdict, "label": None},
        {"id": "b2", "model": "m", "kind": "healthy", "text": "<think>Fine. Done.</think>",
         "verdict": None, "label": None},
        {"id": "c3", "model": "m", "kind": "healthy", "text": "<think>Hmm.</think>",
         "verdict": None, "label": None},
    ]


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    with (tmp_path / "traces-1.jsonl").open("w", encoding="utf-8") as fh:
        for r in records():
            fh.write(json.dumps(r) + "\n")
    return tmp_path


def drive(directory: Path, typed: str, **kw: Any) -> str:
    out = io.StringIO()
    run_label(directory, io.StringIO(typed), out, clock=lambda: 1_700_000_000.0, **kw)
    return out.getvalue()


def test_each_trace_is_shown_and_labelled(directory: Path) -> None:
    """The screen shows the verdict and the tail; ``l`` asks where the loop starts (pasted
    words become an offset), ``h`` and ``a`` label at once; labels go to labels.jsonl and
    the trace file is unchanged."""
    before = (directory / "traces-1.jsonl").read_bytes()
    shown = drive(directory, f"l\n{LOOP_WORDS}\nh\na\nq\n")
    assert "verdict: restatement on thinking at character 407" in shown
    assert f"{LOOP_WORDS}.\n{LOOP_WORDS}." in shown  # the tail
    assert "Where does the loop start?" in shown
    marks = read_marks(directory)
    onset = records()[0]["text"].index(LOOP_WORDS)
    assert {k: (m.label, m.onset) for k, m in marks.items()} == {
        "a1": ("loop", onset), "b2": ("healthy", None), "c3": ("ambiguous", None)}
    assert (directory / "traces-1.jsonl").read_bytes() == before
    assert [t.label for t in load(directory)] == ["loop", "healthy", "ambiguous"]
    assert [t.onset for t in load(directory)] == [onset, None, None]


def test_skip_undo_and_quit(directory: Path) -> None:
    """``s`` leaves a trace for later, ``u`` takes the last label back (an undo line,
    nothing rewritten) and shows that trace again, ``q`` stops; a later run shows only
    what is still unlabelled."""
    drive(directory, "s\nh\nu\na\nq\n")
    lines = (directory / LABELS_FILE).read_text().splitlines()
    assert [json.loads(x)["label"] for x in lines] == ["healthy", None, "ambiguous"]
    assert {k: m.label for k, m in read_marks(directory).items()} == {"b2": "ambiguous"}
    again = drive(directory, "h\nh\nq\n")
    assert again.startswith("2 traces to label")
    assert {k: m.label for k, m in read_marks(directory).items()} == {
        "a1": "healthy", "b2": "ambiguous", "c3": "healthy"}


def test_onset_as_an_offset_and_bad_input(directory: Path) -> None:
    """An onset may be a character offset; words not in the reasoning and unknown
    commands are refused with a hint; the end of input quits."""
    shown = drive(directory, "x\nl\nnot in the text at all\n120\n")
    assert "Unknown command 'x'" in shown
    assert "Those words are not in the reasoning" in shown
    assert read_marks(directory)["a1"].onset == 120


def test_more_tail_and_the_text_where_it_fired(directory: Path) -> None:
    """``m`` shows three times as much of the tail; ``f`` shows the text where it fired,
    marked."""
    session = Session(load(directory), tail=100)
    assert "the last 100 characters" in session.screen()
    assert "the last 300 characters" in session.handle("m").show
    fired = session.handle("f").show
    assert "around character 407" in fired
    at = records()[0]["text"]
    assert at[300:407] + "\u2590" + at[407:500] in fired


def test_a_trace_without_a_recorded_verdict_is_replayed(tmp_path: Path) -> None:
    """A shared trace (no ``verdict`` field) shows the verdict of a replay."""
    line = (TRACES / "loops.jsonl").read_text(encoding="utf-8").splitlines()[-1]
    record = json.loads(line)
    (tmp_path / "shared.jsonl").write_text(json.dumps({**record, "label": None}) + "\n")
    session = Session(load(tmp_path))
    assert "verdict (replayed): recurrence on thinking at character 9,991" in session.screen()


def test_the_command_reads_its_standard_input(directory: Path) -> None:
    """``runaway-sidecar traces label DIR`` in a subprocess, typed into through a pipe."""
    proc = subprocess.run([sys.executable, "-m", "sidecar", "traces", "label", str(directory),
                           "--tail", "200"], input="h\ns\nl\n\nq\n", capture_output=True,
                          text=True, timeout=60, check=True)
    assert "3 traces to label" in proc.stdout
    assert {k: (m.label, m.onset) for k, m in read_marks(directory).items()} == {
        "a1": ("healthy", None), "c3": ("loop", None)}
