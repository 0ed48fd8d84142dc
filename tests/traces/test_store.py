"""Reading a record directory: traces of any ``*.jsonl`` file, the labels in force, and
errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.traces.store import LABELS_FILE, Mark, append_mark, load, read_marks


def test_labels_in_force(tmp_path: Path) -> None:
    """The last labels line of an id wins (null: unlabelled again); a trace with none
    keeps its record's own label and onset; ids fall back to source, then FILE:LINE."""
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"id": "x", "text": "<think>1", "label": "loop"},
        {"source": "s:2", "text": "<think>2", "label": "loop",
         "approx_loop_onset_char_in_text": 3},
        {"text": "<think>3"},
        {"reasoning": "4", "content": "ok", "label": "weird"},
    ]) + "\n")
    with (tmp_path / LABELS_FILE).open("w") as fh:
        append_mark(fh, Mark("x", "healthy"), 0.0)
        append_mark(fh, Mark("a.jsonl:3", "loop", 5), 0.0)
        append_mark(fh, Mark("x", None), 0.0)
    got = [(t.id, t.label, t.onset, t.where) for t in load(tmp_path)]
    assert got == [("x", None, None, "a.jsonl:1"), ("s:2", "loop", 3, "a.jsonl:2"),
                   ("a.jsonl:3", "loop", 5, "a.jsonl:3"), ("a.jsonl:4", None, None, "a.jsonl:4")]
    assert load(tmp_path)[3].text == "4ok"
    assert read_marks(tmp_path)["x"] == Mark("x", None)


@pytest.mark.parametrize(("name", "text", "where"), [
    ("t.jsonl", '{"text": "<think>x"}\n[1]\n', "t.jsonl:2"),
    ("t.jsonl", '{"model": "m"}\n', "t.jsonl:1"),
    ("t.jsonl", "{bad\n", "t.jsonl:1"),
    (LABELS_FILE, '{"id": "x", "label": "maybe"}\n', "labels.jsonl:1"),
])
def test_bad_lines_are_named(tmp_path: Path, name: str, text: str, where: str) -> None:
    """A line that is not a trace (or not a label) is a ValueError naming FILE:LINE."""
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=where):
        load(tmp_path)


def test_a_missing_directory(tmp_path: Path) -> None:
    """No such directory is an OSError (the commands exit 2 on it)."""
    with pytest.raises(OSError, match="no such directory"):
        load(tmp_path / "absent")
