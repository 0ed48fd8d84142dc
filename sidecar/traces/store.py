"""A record directory as the offline tools read it: traces and the operator's labels.

Traces are every ``*.jsonl`` file of the directory but the labels file (the recorder's
``traces-*.jsonl``, or files in the shared traces' format), one JSON object per line with
``text`` (or ``reasoning``/``content``). A trace is known by its ``id``, else its
``source``, else ``FILE:LINE``.

Labels live beside them in ``labels.jsonl``, one line per decision, appended and never
rewritten (the trace files are never touched): ``{"id", "label", "onset", "labelled_at"}``
with ``label`` one of :data:`LABELS` or null (an undo), ``onset`` an offset in the
trace's ``text`` where the loop begins, or null. The last line of an id wins. A trace
with no label line keeps the ``label`` its record carries, if any (the shared traces come
labelled), and its ``approx_loop_onset_char_in_text``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO, get_args

Label = Literal["loop", "healthy", "ambiguous"]
LABELS: tuple[Label, ...] = get_args(Label)
LABELS_FILE = "labels.jsonl"


@dataclass(frozen=True, slots=True)
class Mark:
    """One labels line: ``label`` None is an undo."""

    id: str
    label: Label | None
    onset: int | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """One trace of the directory with its label in force."""

    id: str
    record: Mapping[str, Any]
    where: str  # FILE:LINE
    label: Label | None
    onset: int | None

    @property
    def model(self) -> str:
        """The record's model, or ``unknown``."""
        model = self.record.get("model")
        return model if isinstance(model, str) and model else "unknown"

    @property
    def text(self) -> str:
        """The stream as one text (``reasoning`` + ``content`` for records without
        ``text``, as ``replay`` reads them)."""
        text = self.record.get("text")
        if isinstance(text, str):
            return text
        return str(self.record.get("reasoning") or "") + str(self.record.get("content") or "")


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file; ValueError names the first bad line."""
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(item, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")  # noqa: TRY004 (one error type: a bad file)
            yield number, item


def read_marks(directory: Path) -> dict[str, Mark]:
    """The label in force per trace id (the last line of each id)."""
    path = directory / LABELS_FILE
    marks: dict[str, Mark] = {}
    if not path.exists():
        return marks
    for number, item in _lines(path):
        label, onset = item.get("label"), item.get("onset")
        if not isinstance(item.get("id"), str) or (label is not None and label not in LABELS):
            raise ValueError(f"{path}:{number}: expected an id and a label of "
                             f"{', '.join(LABELS)} or null")
        marks[item["id"]] = Mark(item["id"], label, onset if isinstance(onset, int) else None)
    return marks


def load(directory: Path) -> list[Trace]:
    """Every trace of ``directory`` with its label in force, in file and line order.
    Raises ``ValueError`` naming the file and line of a bad record, ``OSError`` when the
    directory cannot be read."""
    if not directory.is_dir():
        raise FileNotFoundError(f"no such directory: {directory}")
    marks = read_marks(directory)
    traces: list[Trace] = []
    for path in sorted(directory.glob("*.jsonl")):
        if path.name == LABELS_FILE:
            continue
        for number, record in _lines(path):
            if not isinstance(record.get("text"), str) and not (
                    isinstance(record.get("reasoning"), str)
                    or isinstance(record.get("content"), str)):
                raise ValueError(  # noqa: TRY004 (one error type: a bad file)
                    f"{path}:{number}: needs 'text' or 'reasoning'/'content'")
            key = record.get("id") or record.get("source") or f"{path.name}:{number}"
            mark = marks.get(str(key))
            own = record.get("label")
            onset = record.get("approx_loop_onset_char_in_text")
            if mark is not None:
                label, at = mark.label, mark.onset
            else:
                label = own if own in LABELS else None
                at = onset if isinstance(onset, int) and not isinstance(onset, bool) else None
            traces.append(Trace(str(key), record, f"{path.name}:{number}", label, at))
    return traces


def append_mark(out: TextIO, mark: Mark, now: float) -> None:
    """Append one labels line to ``out`` (the open labels file) and flush it to disk, so
    a label survives a crash or a closed terminal."""
    stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds")
    out.write(json.dumps({"id": mark.id, "label": mark.label, "onset": mark.onset,
                          "labelled_at": stamp}) + "\n")
    out.flush()
    os.fsync(out.fileno())
